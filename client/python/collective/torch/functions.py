"""Helpers that make every rank start from the same model and optimizer state.

``broadcast_parameters`` and ``broadcast_optimizer_state`` copy the root's
model and optimizer into every other rank at the start of training (or after
a checkpoint was loaded on the root only). ``broadcast_object`` and
``allgather_object`` live in ``object_collectives``; they are importable from
here too, as from Horovod's ``horovod.torch.functions``.
"""

import torch

from collective.torch.mpi_ops import broadcast_async_, global_process_set, synchronize
from collective.torch.object_collectives import allgather_object  # noqa: F401 (see above)
from collective.torch.object_collectives import broadcast_object
from collective.torch.optimizer import _DistributedOptimizer


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """
    Broadcasts the parameters from root rank to all other processes, in place.
    Typical usage is to broadcast the ``model.state_dict()``,
    ``model.named_parameters()``, or ``model.parameters()``.

    Arguments:
        params: One of the following:
            - dict of parameters to broadcast (``model.state_dict()``); the
              keys name the broadcasts and are sorted so every rank agrees
            - list of ``(name, tensor)`` pairs
              (``list(model.named_parameters())``) or of tensors
              (``list(model.parameters())``, named by position)
        root_rank: The (global) rank of the process from which
                   parameters will be broadcasted to all other processes.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Raises:
        ValueError: ``params`` is neither a dict nor a list (a generator such
                    as ``model.parameters()`` included), as in Horovod.
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else ('broadcast_parameters.%d' % i, p)
                  for i, p in enumerate(params)]
    else:
        raise ValueError('invalid params of type: %s' % type(params))

    # Submit every broadcast before waiting on any, so the daemon can fuse them.
    with torch.no_grad():
        handles = [broadcast_async_(p, root_rank, name=name, process_set=process_set)
                   for name, p in params]
        for handle in handles:
            synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """
    Broadcasts an optimizer state from root rank to all other processes.

    Tensors of the per-parameter state (momentum buffers, Adam moments, ...)
    are broadcast in place; everything else (learning rate, betas, step
    counters kept as Python numbers, ...) is pickled and broadcast as one
    object. An optimizer that has not taken a step yet has no state: it is
    created first, as in Horovod, by one step on zero gradients (on the
    wrapped optimizer when ``optimizer`` is a DistributedOptimizer, so no
    allreduce happens). The parameters are then put back as they were; the
    zero gradients stay, as Horovod leaves them.

    Arguments:
        optimizer: An optimizer (a ``torch.optim.Optimizer`` or a
                   DistributedOptimizer).
        root_rank: The (global) rank of the process from which
                   the optimizer will be broadcasted to all other processes.
        model: (Optional) the model, used as in Horovod to find its sparse
               parameters (those of ``torch.nn.Embedding(sparse=True)``
               modules): an SGD optimizer's state is then created with
               sparse zero gradients for them, as their backward makes.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        # Its state is deeply nested and holds None values; only a pickled
        # state_dict could carry it.
        raise ValueError('cannot broadcast torch.optim.LBFGS state')

    if len(optimizer.state) == 0:
        _initialize_optimizer_state(optimizer, _sparse_parameters(model))
        # Still empty: a stateless optimizer (plain SGD); nothing to send.
        if len(optimizer.state) == 0:
            return

    tensors = []
    scalars = {}
    for group_index, group in enumerate(optimizer.param_groups):
        for option, value in group.items():
            if option != 'params':
                scalars[(group_index, None, option)] = value
        for param_index, p in enumerate(group['params']):
            for key, value in optimizer.state.get(p, {}).items():
                if torch.is_tensor(value):
                    tensors.append(('optimizer_state.%d.%d.%s' % (group_index, param_index, key),
                                    value))
                else:
                    scalars[(group_index, param_index, key)] = value

    broadcast_parameters(tensors, root_rank, process_set=process_set)
    scalars = broadcast_object(scalars, root_rank, name='optimizer_state.scalars',
                               process_set=process_set)
    for (group_index, param_index, key), value in scalars.items():
        group = optimizer.param_groups[group_index]
        if param_index is None:
            group[key] = value
        else:
            optimizer.state[group['params'][param_index]][key] = value


def _sparse_parameters(model):
    """The ids of the parameters of ``model``'s sparse embeddings (none without a model)."""
    if not model:
        return set()
    return {id(p) for m in model.modules()
            if isinstance(m, torch.nn.modules.sparse.Embedding) and m.sparse
            for p in m.parameters()}


def _initialize_optimizer_state(optimizer, sparse_ids):
    """Creates the state of a fresh optimizer by a step on zero gradients, which stay in p.grad.

    The gradients are sparse, as Horovod makes them, for SparseAdam and for an
    SGD's parameters whose ids are in ``sparse_ids``. Parameters that do not
    require grad keep the gradient they had (None, usually). The step must not
    move the parameters (weight decay would): they are put back.
    """
    params = [p for group in optimizer.param_groups for p in group['params'] if p.requires_grad]
    saved = [(p, p.detach().clone()) for p in params]
    for p in params:
        grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        sparse = (isinstance(optimizer, torch.optim.SparseAdam)
                  or (isinstance(optimizer, torch.optim.SGD) and id(p) in sparse_ids))
        p.grad = grad.to_sparse() if sparse else grad

    # A DistributedOptimizer's step() would allreduce, and deadlock unless
    # every rank steps; the wrapped optimizer's step() only builds the state.
    if isinstance(optimizer, _DistributedOptimizer):
        super(_DistributedOptimizer, optimizer).step()
    else:
        optimizer.step()

    with torch.no_grad():
        for p, value in saved:
            p.copy_(value)
