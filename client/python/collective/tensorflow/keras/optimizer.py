"""Horovod's Keras ``DistributedOptimizer``: the wrapped optimizer, whose
``apply_gradients`` first allreduces the gradients over the process set.

``model.fit`` (``minimize``) and custom loops that call ``apply_gradients``
both pass through it. The optimizer keeps its own class name and config.
"""

from collective.common import reduce_ops
from collective.common.process_sets import global_process_set
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import GradientReducer, check_no_groups


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',  # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=reduce_ops.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Horovod's: a copy of ``optimizer`` (from its config) that allreduces gradients before
    applying them. Gradient accumulation (``backward_passes_per_step`` > 1) and grouping are
    not built yet."""
    del name, device_dense, device_sparse, average_aggregated_gradients, scale_local_gradients
    if backward_passes_per_step != 1:
        raise NotImplementedError('collective.tensorflow.keras does not accumulate gradients '
                                  'locally yet: leave backward_passes_per_step at 1.')
    check_no_groups(num_groups, groups)
    reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor,
                              process_set)
    base = optimizer.__class__

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        reduced = [(reducer(gradient), variable) for gradient, variable in grads_and_vars]
        return base.apply_gradients(self, reduced, *args, **kwargs)

    distributed = type(base.__name__, (base,), {
        'apply_gradients': apply_gradients,
        '__doc__': f'{base.__name__} whose gradients are allreduced first (collective).',
    })
    return distributed.from_config(optimizer.get_config())
