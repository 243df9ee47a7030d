"""Horovod's local gradient aggregation (``backward_passes_per_step`` > 1), for a
``tf.compat.v1`` DistributedOptimizer in a graph run by a session and for the Keras
DistributedOptimizer, eagerly or inside ``tf.function``.

As Horovod's ``LocalGradientAggregationHelper`` (and its eager twin), it works in two halves:
- ``compute_gradients`` adds a pass's gradients to local sums and counts the pass; on every
  N-th pass it hands out the allreduced sums (divided by N with
  ``average_aggregated_gradients``) and the count starts again, on the others the pass's own
  gradients;
- ``apply_gradients`` applies them on the passes that reduced (the count back at 0); on the
  others the wrapped optimizer is not run, and only its step counter moves on (the global
  step of a TF1 graph, the Keras optimizer's ``iterations``).
Every rank runs as many passes, so all of them reduce on the same one.

A session graph orders nothing by itself: every read of a sum or of the counter follows the
writes it must see through explicit control dependencies (inside ``tf.function`` and eagerly
they are kept anyway).
"""

import tensorflow as tf


def dense_for_aggregation(gradient, sparse_as_dense):
    """``gradient`` as a dense tensor that a local sum can add (None stays None): a
    ``tf.IndexedSlices`` only with ``sparse_as_dense``, else Horovod's ValueError."""
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    if not sparse_as_dense:
        raise ValueError('IndexedSlices are not supported when `backward_passes_per_step` > 1 '
                         'and `sparse_as_dense` is False.')
    return tf.convert_to_tensor(gradient)


def _local_zeros(name, shape, dtype):
    """A variable of zeros. Lifted out of any tf.function or control flow (its initial value
    too); in a graph, in LOCAL_VARIABLES, as Horovod's: a checkpoint of the model does not
    carry a half-made aggregation."""
    with tf.init_scope():
        if tf.executing_eagerly():
            return tf.Variable(tf.zeros(shape, dtype), trainable=False, name=name)
        return tf.compat.v1.Variable(tf.zeros(shape, dtype), trainable=False, name=name,
                                     use_resource=True,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


def _count_global_step():
    step = tf.compat.v1.train.get_global_step()
    if step is None:
        return tf.no_op()
    return step.assign_add(tf.constant(1, step.dtype.base_dtype), read_value=False)


class GradientAggregator:
    """The local sums and pass counter of one DistributedOptimizer, made at its first pass."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients, sparse_as_dense,
                 reduce_all):
        self._passes = backward_passes_per_step
        self._average = average_aggregated_gradients
        self._sparse_as_dense = sparse_as_dense
        self._reduce_all = reduce_all
        self._counter = None
        self._sums = None

    @property
    def counter(self):
        """The passes since the last reduction (Horovod's ``_agg_helper.counter``); None
        before the first."""
        return self._counter

    def _build(self, gradients):
        self._counter = _local_zeros('collective_aggregation_counter', [], tf.int32)
        self._sums = [None if g is None else
                      _local_zeros('collective_aggregated_gradient', g.shape, g.dtype)
                      for g in gradients]

    def compute_gradients(self, gradients, variables):
        """Adds this pass's ``gradients`` (of ``variables``; None stays None) to the sums and
        returns, on the N-th pass, the allreduced sums, else this pass's own gradients (which
        ``apply_gradients`` then does not apply)."""
        gradients = [dense_for_aggregation(g, self._sparse_as_dense) for g in gradients]
        if self._sums is None:
            self._build(gradients)
        elif len(gradients) != len(self._sums):
            raise ValueError(
                f'backward_passes_per_step > 1 aggregates the gradients of one variable list: '
                f'this optimizer sums {len(self._sums)} gradients, and was given '
                f'{len(gradients)}')
        present = [i for i, g in enumerate(gradients) if g is not None]
        sums = [self._sums[i] for i in present]

        def clear():
            return tf.group(*[total.assign(tf.zeros_like(total)) for total in sums])

        cleared = tf.cond(tf.equal(self._counter.read_value(), 0), clear, tf.no_op)
        with tf.control_dependencies([cleared]):
            added = [total.assign_add(gradients[i]) for total, i in zip(sums, present)]
        with tf.control_dependencies(added):
            passes = self._counter.assign_add(1)

        def reduce_sums():
            totals = [None] * len(gradients)
            for total, i in zip(sums, present):
                totals[i] = total.read_value()
            reduced = self._reduce_all(totals, variables)
            reduced = [reduced[i] for i in present]
            with tf.control_dependencies(reduced):
                reset = self._counter.assign(0)
            with tf.control_dependencies([reset]):
                if self._average:
                    return [r / tf.cast(self._passes, r.dtype) for r in reduced]
                return [tf.identity(r) for r in reduced]

        def own():
            return [tf.identity(gradients[i]) for i in present]

        chosen = tf.cond(tf.equal(passes, self._passes), reduce_sums, own)
        if not isinstance(chosen, (list, tuple)):
            chosen = [chosen]
        results = [None] * len(gradients)
        for i, result in zip(present, chosen):
            results[i] = result
        return results

    def apply_gradients(self, apply, gradients, count=_count_global_step):
        """``apply`` (the wrapped optimizer's apply_gradients) on the pass whose
        ``compute_gradients`` reduced, after ``gradients``; on the other passes ``count``
        (the optimizer's step counter moves on). Both return alike (ops in a graph)."""
        with tf.control_dependencies([g for g in gradients if g is not None]):
            applied = tf.equal(self._counter.read_value(), 0)
            return tf.cond(applied, apply, count)
