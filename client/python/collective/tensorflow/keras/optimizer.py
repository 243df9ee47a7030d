"""Horovod's Keras ``DistributedOptimizer``: the wrapped optimizer, whose
``apply_gradients`` first allreduces the gradients over the process set (in ``groups`` if
asked, after ``backward_passes_per_step`` local passes if asked).

``model.fit`` (``minimize``) and custom loops that call ``apply_gradients``
both pass through it. The optimizer keeps its own class name and config.
"""

from collective.common import reduce_ops
from collective.common.process_sets import global_process_set
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import GradientReducer, local_layer_variables
from collective.tensorflow.gradient_groups import resolve_groups
from collective.tensorflow.keras.gradient_aggregation import LocalGradientAggregator


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',  # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=reduce_ops.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Horovod's: a copy of ``optimizer`` (from its config) that allreduces gradients before
    applying them: one by one, or in ``groups`` (a count, or lists of variables); with
    ``backward_passes_per_step`` > 1, the local sums of that many passes (see
    ``gradient_aggregation``). Variables registered with ``register_local_var`` keep their
    own gradients (divided by the set's size with ``scale_local_gradients``)."""
    del name, device_dense, device_sparse
    reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor,
                              process_set, resolve_groups(num_groups, groups),
                              scale_local_gradients)
    aggregator = (LocalGradientAggregator(backward_passes_per_step, average_aggregated_gradients,
                                          sparse_as_dense)
                  if backward_passes_per_step > 1 else None)
    base = optimizer.__class__

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        gradients, variables = [g for g, _ in pairs], [v for _, v in pairs]
        if aggregator is None:
            reduced = reducer.reduce_all(gradients, variables)
            return base.apply_gradients(self, list(zip(reduced, variables)), *args, **kwargs)
        return aggregator.apply(
            self, gradients, variables, reducer.reduce_all,
            lambda reduced: base.apply_gradients(self, reduced, *args, **kwargs))

    def register_local_var(self, var):
        """Horovod's: ``var`` is this worker's own; its gradient is not reduced."""
        del self
        reducer.register_local(var)

    distributed = type(base.__name__, (base,), {
        'apply_gradients': apply_gradients,
        'register_local_var': register_local_var,
        '__doc__': f'{base.__name__} whose gradients are allreduced first (collective).',
    })
    return distributed.from_config(optimizer.get_config())


def PartialDistributedOptimizer(optimizer, name=None, device_dense='',  # noqa: N802 (Horovod)
                                device_sparse='', compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=reduce_ops.Average, backward_passes_per_step=1,
                                average_aggregated_gradients=False, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """Horovod's: a ``DistributedOptimizer`` whose ``local_layers``' trainable weights are
    registered as local variables (their gradients are not reduced)."""
    distributed = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)
    for variable in local_layer_variables(local_layers):
        distributed.register_local_var(variable)
    return distributed
