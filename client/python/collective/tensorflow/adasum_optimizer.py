"""Horovod's ``DistributedOptimizer(..., op=hvd.Adasum)`` for a ``tf.compat.v1`` optimizer
(its ``_DistributedAdasumOptimizer``): the wrapped optimizer applies each worker's own
gradients, and every ``backward_passes_per_step``-th step the workers combine what their
weights moved since the last combination by an Adasum allreduce.

Per variable it keeps a slot ``delta_start``: the weights of the last combination (those of
the first step before it). On a combining step, after the local update:
``delta = var - start``; ``start += Adasum(delta)``; ``var = start``. The step counter is
the optimizer's own. Gradients are not reduced (``compute_gradients`` is the wrapped
optimizer's).

Horovod 0.28.1's class forwards ``apply_gradients`` to the wrapped optimizer, which bypasses
its own combination (the workers then train apart); here ``apply_gradients`` combines, as
the class's docstring and Horovod's Adasum guide describe.
"""

import tensorflow as tf

from collective.common import reduce_ops
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import allreduce

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class DistributedAdasumOptimizer(_LegacyOptimizer):
    """A ``tf.compat.v1.train.Optimizer`` that combines the workers' weight updates by
    Adasum every ``backward_passes_per_step`` steps."""

    def __init__(self, optimizer, name=None, use_locking=False,
                 compression=Compression.none, backward_passes_per_step=1):
        if name is None:
            name = f'DistributedDelta{type(optimizer).__name__}'
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression
        self._passes = backward_passes_per_step
        self._step_count = None

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients, unreduced."""
        return self._optimizer.compute_gradients(*args, **kwargs)

    def _combine(self, variables, starts):
        """``start += Adasum(var - start); var = start`` for every variable."""
        combined = []
        for index, (var, start) in enumerate(zip(variables, starts)):
            delta = var.assign_sub(start, use_locking=self._use_locking)
            total = allreduce(delta, op=reduce_ops.Adasum, compression=self._compression,
                              name=f'{self.get_name()}.delta.{index}')
            new_start = start.assign_add(total, use_locking=self._use_locking)
            combined.append(var.assign(new_start, use_locking=self._use_locking))
        return tf.group(*combined)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's update of ``grads_and_vars``, followed on every
        ``backward_passes_per_step``-th step by the combination of the workers' updates."""
        grads_and_vars = list(grads_and_vars)
        variables = [var for grad, var in grads_and_vars if grad is not None]
        if not variables:
            raise ValueError(f'No gradients provided for any variable: {grads_and_vars}.')
        with tf.init_scope():
            if self._step_count is None:
                self._step_count = tf.compat.v1.Variable(
                    tf.constant(0, tf.int64), trainable=False, use_resource=True,
                    name=f'{self.get_name()}_step_count')
            starts = [self._zeros_slot(var, 'delta_start', self.get_name()) for var in variables]
        step = self._step_count.read_value()
        # The first step starts from the weights as they are then (after a broadcast of the
        # root's, typically), not as each worker initialised them.
        started = tf.cond(
            tf.equal(step, 0),
            lambda: tf.group(*[start.assign(var, use_locking=self._use_locking)
                               for var, start in zip(variables, starts)]),
            tf.no_op)
        with tf.control_dependencies([started]):
            update = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                     name=name)
        with tf.control_dependencies([update]):
            communicates = tf.equal(step % self._passes, self._passes - 1)
            combined = tf.cond(communicates, lambda: self._combine(variables, starts),
                               tf.no_op)
        with tf.control_dependencies([combined]):
            return self._step_count.assign_add(1, read_value=False)

    def get_slot(self, var, name):
        """``delta_start`` of ``var``, or the wrapped optimizer's slot ``name``."""
        own = super().get_slot(var, name)
        return own if own is not None else self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        """``delta_start`` and the wrapped optimizer's slot names."""
        return super().get_slot_names() + self._optimizer.get_slot_names()

    def variables(self, *args, **kwargs):
        """The wrapped optimizer's variables and this optimizer's own (its step count and
        the Adasum deltas' starting points)."""
        return self._optimizer.variables(*args, **kwargs)
