"""Helpers that make every rank start from, and agree on, the same state.

``broadcast_parameters`` and ``broadcast_optimizer_state`` copy the root's
model and optimizer into every other rank at the start of training (or after
a checkpoint was loaded on the root only); ``broadcast_object`` and
``allgather_object`` move arbitrary picklable Python objects.
"""

import pickle

import torch

from collective.torch.mpi_ops import allgather, broadcast_, broadcast_async_, synchronize
from collective.torch.mpi_ops import global_process_set, rank


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """
    Broadcasts the parameters from root rank to all other processes, in place.
    Typical usage is to broadcast the ``model.state_dict()``,
    ``model.named_parameters()``, or ``model.parameters()``.

    Arguments:
        params: One of the following:
            - dict of parameters to broadcast (``model.state_dict()``); the
              keys name the broadcasts and are sorted so every rank agrees
            - iterable of ``(name, tensor)`` pairs (``model.named_parameters()``)
            - iterable of tensors (``model.parameters()``), named by position
        root_rank: The (global) rank of the process from which
                   parameters will be broadcasted to all other processes.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (str, bytes)) or not hasattr(params, '__iter__'):
        raise ValueError('invalid params of type: %s' % type(params))
    else:
        params = [p if isinstance(p, tuple) else ('broadcast_parameters.%d' % i, p)
                  for i, p in enumerate(params)]

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
    created first by one step on zero gradients (on the wrapped optimizer
    when ``optimizer`` is a DistributedOptimizer, so no allreduce happens),
    after which the parameters and gradients are put back as they were.

    Arguments:
        optimizer: An optimizer (a ``torch.optim.Optimizer`` or a
                   DistributedOptimizer).
        root_rank: The (global) rank of the process from which
                   the optimizer will be broadcasted to all other processes.
        model: Accepted for compatibility with Horovod's signature and not
               used: the state-creating step puts the optimizer's parameters
               (the model's weights) back by itself.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.
    """
    del model  # see the docstring
    if isinstance(optimizer, torch.optim.LBFGS):
        # Its state is deeply nested and holds None values; only a pickled
        # state_dict could carry it.
        raise ValueError('cannot broadcast torch.optim.LBFGS state')

    if len(optimizer.state) == 0:
        _initialize_optimizer_state(optimizer)
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


def _initialize_optimizer_state(optimizer):
    """Creates the state of a fresh optimizer without changing its parameters or gradients."""
    # Imported here: the optimizer module imports this one.
    from collective.torch.optimizer import _DistributedOptimizer

    params = [p for group in optimizer.param_groups for p in group['params'] if p.requires_grad]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    for p in params:
        grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        p.grad = grad.to_sparse() if isinstance(optimizer, torch.optim.SparseAdam) else grad

    # A DistributedOptimizer's step() would allreduce, and deadlock unless
    # every rank steps; the wrapped optimizer's step() only builds the state.
    if isinstance(optimizer, _DistributedOptimizer):
        super(_DistributedOptimizer, optimizer).step()
    else:
        optimizer.step()

    with torch.no_grad():
        for p, value, grad in saved:
            p.copy_(value)
            p.grad = grad


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """
    Serializes and broadcasts an object from root rank to all other processes.
    Typical usage is to broadcast the ``optimizer.state_dict()``, for example:

    .. code-block:: python

        state_dict = broadcast_object(optimizer.state_dict(), 0)
        if collective.torch.rank() > 0:
            optimizer.load_state_dict(state_dict)

    Arguments:
        obj: An object that ``pickle`` can serialize. Only the root's matters;
             the other ranks may pass anything (e.g. ``None``).
        root_rank: The (global) rank of the process from which
                   the object will be broadcasted to all other processes.
        name: Optional name of the broadcasts; every rank must use the same.
              Defaults to ``broadcast_object``.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        The object that was broadcast from the ``root_rank``.
    """
    # Unlike Horovod, the default name does not depend on type(obj): the other
    # ranks often pass None, and differing names would never match.
    name = name or 'broadcast_object'
    is_root = rank() == root_rank

    payload = _serialize(obj) if is_root else None
    length = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name=name + '.sz', process_set=process_set)
    if not is_root:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name + '.t', process_set=process_set)
    return obj if is_root else _deserialize(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """
    Serializes and allgathers an object from all other processes.

    Arguments:
        obj: An object that ``pickle`` can serialize.
        name: Optional name of the allgathers; every rank must use the same.
              Defaults to ``allgather_object``.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        The list of objects that were allgathered across all ranks of the
        process set, in rank order.
    """
    name = name or 'allgather_object'
    payload = _serialize(obj)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64),
                        name=name + '.sz', process_set=process_set)
    gathered = allgather(payload, name=name + '.t', process_set=process_set)
    return [_deserialize(chunk) for chunk in torch.split(gathered, lengths.tolist())]


def _serialize(obj):
    """Pickles obj into a uint8 tensor."""
    return torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)),
                            dtype=torch.uint8)


def _deserialize(tensor):
    """Unpickles an object from a uint8 tensor made by _serialize."""
    return pickle.loads(tensor.numpy().tobytes())
