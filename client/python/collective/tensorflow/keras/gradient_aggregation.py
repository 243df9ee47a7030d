"""Horovod's local gradient aggregation for Keras' DistributedOptimizer
(``backward_passes_per_step`` > 1): each call of ``apply_gradients`` adds the gradients to
local sums; every ``backward_passes_per_step``-th call allreduces the sums (divided by
``backward_passes_per_step`` with ``average_aggregated_gradients``), applies them and clears
them, while the other calls only count the optimizer's iteration, as Horovod's do.

Every rank calls ``apply_gradients`` equally often, so all of them reduce on the same call;
eagerly and inside ``tf.function`` (the choice is a ``tf.cond`` on a counter variable)."""

import tensorflow as tf

from collective.tensorflow.gradient_aggregation import dense_for_aggregation


class LocalGradientAggregator:
    """The local sums and the pass counter of one optimizer, made at its first call."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients, sparse_as_dense):
        self._passes = backward_passes_per_step
        self._average = average_aggregated_gradients
        self._sparse_as_dense = sparse_as_dense
        self._counter = None
        self._sums = None

    def _build(self, gradients, variables):
        # Lifted out of any tf.function: the variables outlive its trace.
        with tf.init_scope():
            self._counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name='collective_aggregation_counter')
            self._sums = [None if gradient is None else
                          tf.Variable(tf.zeros(variable.shape, dtype=gradient.dtype),
                                      trainable=False, name='collective_aggregated_gradient')
                          for gradient, variable in zip(gradients, variables)]

    def apply(self, optimizer, gradients, variables, reduce_all, apply):
        """Adds ``gradients`` to the sums; on every ``backward_passes_per_step``-th call runs
        ``apply`` (the wrapped optimizer's apply_gradients) on the allreduced sums
        (``reduce_all(gradients, variables)``), else counts the optimizer's iteration.
        Returns the optimizer's iteration count."""
        gradients = [dense_for_aggregation(g, self._sparse_as_dense) for g in gradients]
        if self._sums is None:
            self._build(gradients, variables)
        for total, gradient in zip(self._sums, gradients):
            if gradient is not None:
                total.assign_add(gradient)
        passes = self._counter.assign_add(1)

        def reduce_and_apply():
            totals = [None if total is None else total.read_value() for total in self._sums]
            reduced = reduce_all(totals, variables)
            if self._average:
                reduced = [None if r is None else r / self._passes for r in reduced]
            apply([(r, v) for r, v in zip(reduced, variables) if r is not None])
            for total in self._sums:
                if total is not None:
                    total.assign(tf.zeros_like(total))
            self._counter.assign(0)
            return tf.identity(optimizer.iterations)

        def count_only():
            return tf.identity(optimizer.iterations.assign_add(1))

        return tf.cond(passes >= self._passes, reduce_and_apply, count_only)
