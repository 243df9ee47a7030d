"""Horovod's TensorFlow API for TF1-style programs (graphs run by a session) and its
optimizer entry point: ``DistributedOptimizer`` (a ``tf.compat.v1.train.Optimizer``
wrapped, with local aggregation (``gradient_aggregation``) or Adasum
(``adasum_optimizer``) if asked, or a Keras optimizer handed to
``collective.tensorflow.keras``),
``broadcast_global_variables`` and ``BroadcastGlobalVariablesHook``.
"""

import tensorflow as tf

from collective.common import reduce_ops
from collective.common.process_sets import global_process_set
from collective.tensorflow.adasum_optimizer import DistributedAdasumOptimizer
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import GradientReducer, broadcast_variables
from collective.tensorflow.gradient_aggregation import GradientAggregator
from collective.tensorflow.gradient_groups import resolve_groups

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_LegacyOptimizer):
    """A ``tf.compat.v1.train.Optimizer`` that allreduces the gradients the wrapped one
    computes, before they are applied; with ``aggregator`` (``backward_passes_per_step`` > 1),
    the local sums of that many runs."""

    def __init__(self, optimizer, name, use_locking, reducer, aggregator=None):
        if name is None:
            name = f'Distributed{type(optimizer).__name__}'
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._reducer = reducer
        self._aggregator = aggregator

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients, each allreduced over the process set."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        gradients = [gradient for gradient, _ in pairs]
        variables = [variable for _, variable in pairs]
        if self._aggregator is not None:
            return list(zip(self._aggregator.compute_gradients(gradients, variables), variables))
        return list(zip(self._reducer.reduce_all(gradients, variables), variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's; with local aggregation, on the runs that reduced only."""
        if self._aggregator is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                   name=name)
        grads_and_vars = list(grads_and_vars)
        return self._aggregator.apply_gradients(
            lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                    name=name),
            [gradient for gradient, _ in grads_and_vars])

    def get_slot(self, *args, **kwargs):
        """The wrapped optimizer's ``get_slot``."""
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        """The wrapped optimizer's ``get_slot_names``."""
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        """The wrapped optimizer's ``variables``."""
        return self._optimizer.variables(*args, **kwargs)

    def register_local_var(self, var):
        """Horovod's: ``var`` is this worker's own; its gradient is not reduced."""
        self._reducer.register_local(var)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='',  # noqa: N802
                         device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1,
                         op=reduce_ops.Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's ``horovod.tensorflow.DistributedOptimizer``: a ``tf.compat.v1.train``
    optimizer whose ``compute_gradients`` allreduces (so ``minimize`` does), or, for a Keras
    optimizer, ``collective.tensorflow.keras.DistributedOptimizer``."""
    del device_dense, device_sparse
    if gradient_predivide_factor != 1.0 and op != reduce_ops.Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if op == reduce_ops.Adasum and average_aggregated_gradients:
        raise ValueError('Adasum does not support average_aggregated_gradients == True')
    groups = resolve_groups(num_groups, groups)

    if not isinstance(optimizer, _LegacyOptimizer):
        if op == reduce_ops.Adasum:
            raise ValueError('op == Adasum is not supported yet with Keras')
        # At the call: the keras package imports collective.tensorflow, which imports
        # this module.
        from collective.tensorflow.keras.optimizer import \
            DistributedOptimizer as keras_distributed_optimizer
        return keras_distributed_optimizer(
            optimizer=optimizer, name=name, compression=compression,
            sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
    if op == reduce_ops.Adasum:
        if process_set.process_set_id != global_process_set.process_set_id:
            raise NotImplementedError('Adasum does not support process sets yet')
        return DistributedAdasumOptimizer(optimizer, name, use_locking, compression,
                                          backward_passes_per_step)
    if name is None:
        name = f'Distributed{type(optimizer).__name__}'
    reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor,
                              process_set, groups, scale_local_gradients, name=name)
    aggregator = None
    if backward_passes_per_step > 1:
        if tf.executing_eagerly():
            raise ValueError('backward_passes_per_step > 1 is not yet supported for '
                             '_LegacyOptimizer with eager execution.')
        aggregator = GradientAggregator(backward_passes_per_step,
                                             average_aggregated_gradients, sparse_as_dense,
                                             reducer.reduce_all)
    return _DistributedOptimizer(optimizer, name, use_locking, reducer, aggregator)


def broadcast_global_variables(root_rank):
    """Horovod's: an op that assigns every global variable of the graph its value on
    ``root_rank``. Graphs only, as in Horovod."""
    if tf.executing_eagerly():
        raise RuntimeError(
            'hvd.broadcast_global_variables() does not support eager execution. '
            'Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.')
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Horovod's SessionRunHook: once the session is created (``MonitoredTrainingSession``,
    an Estimator), every global variable takes its value on ``root_rank``, so that all
    workers start from the same weights, whether initialised at random or from a
    checkpoint."""

    def __init__(self, root_rank, device=''):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        """Builds the broadcast of every global variable, once per graph (the hook may be
        reused with a new graph)."""
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        """Runs the broadcast in the new ``session``."""
        del coord
        session.run(self.bcast_op)
