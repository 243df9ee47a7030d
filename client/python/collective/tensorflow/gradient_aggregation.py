"""Horovod's local gradient aggregation for a ``tf.compat.v1`` optimizer
(``DistributedOptimizer(..., backward_passes_per_step=N)`` in a graph run by a session).

Each run of the training op adds the pass's gradients to local sums. On every N-th run
``compute_gradients`` hands out the allreduced sums (divided by N with
``average_aggregated_gradients``) and ``apply_gradients`` applies them; on the other runs the
wrapped optimizer is not run, and only the global step moves on, as in Horovod's
``LocalGradientAggregationHelper``. Every rank runs the training op equally often, so all of
them reduce on the same run.

A session graph orders nothing by itself: every read of a sum or of the pass counter
follows the writes it must see through explicit control dependencies. Graphs only: eagerly
Horovod refuses it, and so does ``DistributedOptimizer``.
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


class GraphGradientAggregator:
    """The local sums and pass counter of one ``tf.compat.v1`` DistributedOptimizer."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients, sparse_as_dense,
                 reduce_all):
        self._passes = backward_passes_per_step
        self._average = average_aggregated_gradients
        self._sparse_as_dense = sparse_as_dense
        self._reduce_all = reduce_all
        self._counter = None

    def _local_variable(self, name, initial_value):
        # Lifted out of any control flow; LOCAL_VARIABLES, as Horovod's: a checkpoint of the
        # model does not carry a half-made aggregation.
        with tf.init_scope():
            return tf.compat.v1.Variable(
                initial_value, trainable=False, name=name, use_resource=True,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

    def compute_gradients(self, gradients, variables):
        """Adds this pass's ``gradients`` (of ``variables``; None stays None) to the sums and
        returns, on the N-th pass, the allreduced sums, else this pass's own gradients (which
        ``apply_gradients`` then does not apply)."""
        gradients = [dense_for_aggregation(g, self._sparse_as_dense) for g in gradients]
        present = [i for i, g in enumerate(gradients) if g is not None]
        if self._counter is None:
            self._counter = self._local_variable('collective_aggregation_counter',
                                                 tf.constant(0, tf.int32))
        sums = [self._local_variable('collective_aggregated_gradient',
                                     tf.zeros(gradients[i].shape, gradients[i].dtype))
                for i in present]

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

    def apply_gradients(self, apply, gradients):
        """``apply`` (the wrapped optimizer's apply_gradients) on the run whose
        ``compute_gradients`` reduced (the counter back at 0), after ``gradients``; on the
        other runs only the global step (if the graph has one) moves on."""

        def count_only():
            step = tf.compat.v1.train.get_global_step()
            if step is None:
                return tf.no_op()
            return step.assign_add(tf.constant(1, step.dtype.base_dtype), read_value=False)

        with tf.control_dependencies([g for g in gradients if g is not None]):
            applied = tf.equal(self._counter.read_value(), 0)
            return tf.cond(applied, apply, count_only)
