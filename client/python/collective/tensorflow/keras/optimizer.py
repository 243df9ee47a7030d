"""Horovod's Keras ``DistributedOptimizer``: the wrapped optimizer, whose gradients are
allreduced over the process set where they are computed (in ``groups`` if asked, after
``backward_passes_per_step`` local passes if asked), as Horovod 0.28's:
``compute_gradients``, ``_compute_gradients`` (legacy optimizers) and ``get_gradients``
return them reduced, so ``minimize`` and ``model.fit`` reduce; ``apply_gradients`` applies
what it is given (with local aggregation, on the passes that reduced only). A custom loop
reduces through ``DistributedGradientTape``, as Horovod documents. The optimizer keeps its
own class name and config.
"""

import tensorflow as tf

from collective.common import reduce_ops
from collective.common.process_sets import global_process_set
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import GradientReducer, local_layer_variables
from collective.tensorflow.gradient_aggregation import GradientAggregator
from collective.tensorflow.gradient_groups import resolve_groups


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',  # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=reduce_ops.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Horovod's: a copy of ``optimizer`` (from its config) whose computed gradients are
    allreduced: one by one, or in ``groups`` (a count, or lists of variables); with
    ``backward_passes_per_step`` > 1, the local sums of that many passes (see
    ``gradient_aggregation``; ``_agg_helper.counter`` counts the passes, as Horovod's).
    Variables registered with ``register_local_var`` keep their own gradients (divided by
    the set's size with ``scale_local_gradients``).

    ``op`` is Average or Sum (else ValueError, as Horovod's). ``name``, by default
    'Distributed' and the optimizer's class name, becomes the optimizer's ``_name`` (a legacy
    optimizer's config carries it) and names the gradients' reductions' scope
    ('<name>_Allreduce'), as Horovod's.
    """
    del device_dense, device_sparse
    if op not in (reduce_ops.Average, reduce_ops.Sum):
        raise ValueError('op currently only supports Average and Sum')
    name = name or f'Distributed{optimizer.__class__.__name__}'
    reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor,
                              process_set, resolve_groups(num_groups, groups),
                              scale_local_gradients, name=name)
    aggregator = (GradientAggregator(backward_passes_per_step, average_aggregated_gradients,
                                     sparse_as_dense, reducer.reduce_all)
                  if backward_passes_per_step > 1 else None)
    base = optimizer.__class__

    def reduce(gradients, variables):
        gradients, variables = list(gradients), list(variables)
        if aggregator is None:
            return reducer.reduce_all(gradients, variables)
        return aggregator.compute_gradients(gradients, variables)

    def compute_gradients(self, loss, var_list, tape=None):
        """Horovod's: the wrapped optimizer's gradients of ``loss``, reduced."""
        return self._compute_gradients(loss, var_list, None, tape)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """Horovod's: the wrapped (legacy or new) optimizer's (gradient, variable) pairs,
        the gradients reduced (after local aggregation, if asked)."""
        tape = tf.GradientTape() if tape is None else tape
        if hasattr(base, '_compute_gradients'):  # a legacy (OptimizerV2) optimizer
            compute = base._compute_gradients  # noqa: SLF001
            pairs = compute(self, loss, var_list, grad_loss, tape=tape)
        else:
            pairs = base.compute_gradients(self, loss, var_list, tape=tape)
        variables = [v for _, v in pairs]
        return list(zip(reduce([g for g, _ in pairs], variables), variables))

    def get_gradients(self, loss, params):
        """Horovod's: the legacy optimizer's gradients of ``loss`` (Keras in a TF1 graph),
        reduced."""
        return reduce(base.get_gradients(self, loss, params), params)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        """The wrapped optimizer's; with local aggregation, on the passes that reduced
        only (the others count ``iterations`` on)."""
        if aggregator is None:
            return base.apply_gradients(self, grads_and_vars, *args, **kwargs)
        pairs = list(grads_and_vars)

        def apply():
            base.apply_gradients(self, pairs, *args, **kwargs)
            return tf.identity(self.iterations)

        return aggregator.apply_gradients(apply, [g for g, _ in pairs],
                                          lambda: tf.identity(self.iterations.assign_add(1)))

    def register_local_var(self, var):
        """Horovod's: ``var`` is this worker's own; its gradient is not reduced."""
        del self
        reducer.register_local(var)

    members = {
        'compute_gradients': compute_gradients,
        '_compute_gradients': _compute_gradients,
        'apply_gradients': apply_gradients,
        'register_local_var': register_local_var,
        '_agg_helper': aggregator,
        '__doc__': f'{base.__name__} whose gradients are allreduced (collective).',
    }
    if hasattr(base, 'get_gradients'):
        members['get_gradients'] = get_gradients
    distributed = type(base.__name__, (base,), members)
    wrapped = distributed.from_config(optimizer.get_config())
    wrapped._name = name  # noqa: SLF001 (Horovod's: a legacy optimizer's name)
    return wrapped


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
