"""Tensors that live in this process's shared-memory arena: ``hvd.empty``, ``hvd.zeros`` and
``hvd.to_arena``.

A collective's input that lies in the arena reaches the daemon where it is; any other
tensor is first copied there by libcollective (and that copy is most of what the Python
path costs over the C++ one for large tensors). Buffers a trainer reduces or broadcasts
again and again (gradient buckets of its own, statistics, a model's parameters that it
broadcasts) can be allocated here instead of with ``torch.empty``::

    flat = hvd.zeros(1 << 20)            # float32, in the arena
    ...                                  # fill it (views of it are in the arena too)
    hvd.allreduce_(flat, op=hvd.Sum)     # read in place: nothing copied in

Tensors made elsewhere move in, keeping their identity, with ``hvd.to_arena``: a model's
parameters and buffers before ``broadcast_parameters``, an optimizer's state before
``broadcast_optimizer_state``, the user's own buffers (``hvd.in_arena`` tells whether a
tensor lies there)::

    model = Net()
    optimizer = hvd.DistributedOptimizer(...)   # first: its gradient buckets take their share
    hvd.to_arena(model)                  # its parameters' data now lies in the arena
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)   # nothing copied

The daemon writes the result of an allreduce (Adasum's too), a broadcast or a
reducescatter straight into an output that lies in the arena, on one node and across nodes
(so ``allreduce_`` above, and ``broadcast_`` of such a tensor, copy nothing at all); other
results (allgather's, alltoall's) come back through the job's result segment and are
copied into the tensor
(``DistributedOptimizer`` keeps its gradients in the arena the same way,
``collective.torch.grad_buckets``). The new tensors that ``allreduce``, ``broadcast`` and
``reducescatter`` return are arena tensors too when they are large (``result_tensor``), so
that the daemon writes them and a collective of one reads it in place. Such a tensor is an
ordinary CPU tensor: every other
operation works on it, and it keeps its memory (and the connection's mapping) alive until
it is freed, also past ``shutdown()``; after a new ``init()`` it is no longer in the new
connection's arena and takes the copy path. The arena is ``arena_bytes`` in all
(``COLLECTIVE_ARENA_BYTES``, the daemon's ``default_arena_bytes``), shared with the copies
of other inputs: a tensor that does not fit raises ``HorovodInternalError``.
"""

import collections
import math

import torch

from collective.common import connection as connections
from collective.common.exceptions import HorovodInternalError
from collective.torch import grad_buckets


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    if any(not isinstance(n, int) or n < 0 for n in size):
        raise ValueError(f'a shape is non-negative integers, not {size!r}')
    return tuple(size)


def _nbytes(shape, dtype):
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def empty(*size, dtype=None):
    """An uninitialised CPU tensor of ``size`` and ``dtype`` (torch's default dtype unless
    given) in this process's shared-memory arena. Needs ``init()``."""
    shape = _shape(size)
    dtype = dtype or torch.get_default_dtype()
    numel = math.prod(shape)
    if numel == 0:
        return torch.empty(shape, dtype=dtype)  # nothing to place: no arena block
    buffer = connections.current().client.allocate(_nbytes(shape, dtype))
    # frombuffer keeps the Buffer (and with it the block) alive as long as the tensor.
    return torch.frombuffer(buffer, dtype=dtype, count=numel).view(shape)


def result_tensor(shape, dtype, min_bytes=1 << 16):
    """A new CPU tensor for a result the daemon writes: in the arena when it holds at least
    ``min_bytes`` and leaves at least half of the arena free (the rest is for the copies of
    inputs; results a trainer keeps must not crowd them out), so that the daemon writes it
    there, with no copy out, and a later collective reads it in place; otherwise an ordinary
    tensor (the copy path)."""
    shape = tuple(shape)
    nbytes = _nbytes(shape, dtype)
    client = connections.current().client
    if nbytes < min_bytes or client.arena_free_bytes - nbytes < client.arena_bytes // 2:
        return torch.empty(shape, dtype=dtype)
    return empty(shape, dtype=dtype)


def zeros(*size, dtype=None):
    """``empty``, filled with zeros."""
    return empty(*size, dtype=dtype).zero_()


def in_arena(tensor):
    """Whether ``tensor``'s data lies in this process's arena (a collective then reads it
    where it is). Needs ``init()``."""
    if tensor.layout != torch.strided or tensor.device.type != 'cpu' or tensor.numel() == 0:
        return False
    # From its first element to its last, whatever its (non-negative) strides.
    span = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return connections.current().client.in_arena(tensor.data_ptr(), span * tensor.element_size())


def to_arena(tensors):
    """Moves tensors into this process's arena, each keeping its identity: its data becomes a
    block of the arena holding the same values (``tensor.data = ...``), so whatever refers to
    the tensor (a module, an optimizer, the user's own names) sees the move. Collectives then
    read and write them where they are: ``broadcast_parameters``, ``broadcast_optimizer_state``,
    ``broadcast_`` and ``allreduce_`` of them copy nothing. Needs ``init()``.

    ``tensors``: a ``torch.nn.Module`` (its parameters and buffers), a ``torch.optim.Optimizer``
    (the tensors of its state, which optimizers make at their first step), a tensor, a dict (a
    ``state_dict``), or an iterable of tensors or of (name, tensor) pairs.

    A tensor stays where it is, and its collectives take the copy path as before, when moving it
    would change what aliases it or how it is laid out: when it is not a dense, contiguous CPU
    tensor of a dtype the daemon takes, when it is a view (of another tensor, or of part of its
    storage), when another of the tensors given shares its storage, or when other processes
    share it (``share_memory_()``). So does one that lies in the arena already, and any once
    the moves have taken ``grad_buckets.ARENA_SHARE`` of the arena's free space (the rest holds
    the copies of other inputs and a DistributedOptimizer's gradient buckets: build the
    optimizer first, whose buckets a model moved before it would leave less room;
    ``COLLECTIVE_ARENA_BYTES`` makes the arena larger). A view taken of a tensor before its
    move still shows the old memory: move first.

    Returns the number of bytes moved.
    """
    candidates = {id(t): t for t in _tensors_of(tensors)}.values()
    storage_of = {id(t): _storage_of(t) for t in candidates}
    sharers = collections.Counter(storage_of.values())
    budget = grad_buckets.arena_budget(connections.current().client)
    moved = 0
    with torch.no_grad():
        for tensor in candidates:
            nbytes = tensor.numel() * tensor.element_size()
            if (not _movable(tensor) or sharers[storage_of[id(tensor)]] > 1 or in_arena(tensor)
                    or moved + nbytes > budget):
                continue
            try:
                home = empty(tensor.shape, dtype=tensor.dtype)
            except HorovodInternalError:
                break  # the arena refused a block: the rest stays where it is
            tensor.data = home.copy_(tensor)
            moved += nbytes
    return moved


def _tensors_of(tensors):
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    if isinstance(tensors, torch.nn.Module):
        return list(tensors.parameters()) + list(tensors.buffers())
    if isinstance(tensors, torch.optim.Optimizer):
        return [value for state in tensors.state.values() for value in state.values()
                if isinstance(value, torch.Tensor)]
    if isinstance(tensors, dict):
        tensors = tensors.values()
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, '__iter__'):
        raise ValueError(f'to_arena takes a module, an optimizer, a tensor, a dict or an '
                         f'iterable of tensors, not {type(tensors).__name__}')
    found = []
    for item in tensors:
        if isinstance(item, tuple) and len(item) == 2:
            item = item[1]  # (name, tensor)
        if not isinstance(item, torch.Tensor):
            raise ValueError(f'to_arena takes tensors, not {type(item).__name__}')
        found.append(item)
    return found


def _storage(tensor):
    # untyped_storage: torch 2 (where storage() warns that TypedStorage is deprecated).
    untyped = getattr(tensor, 'untyped_storage', None)
    return untyped() if untyped is not None else tensor.storage()


def _storage_of(tensor):
    """What tells tensors that share memory: their device and storage's address (a tensor
    with no address of its own, sparse or on the meta device, stands for itself)."""
    if tensor.layout != torch.strided or tensor.device.type == 'meta':
        return id(tensor)
    return tensor.device, _storage(tensor).data_ptr()


def _movable(tensor):
    """A tensor that can be an arena block (``grad_buckets.viewable``), alone in all of its
    storage, which no other process maps (``share_memory_()``: moving it would unshare it)."""
    return (grad_buckets.viewable(tensor) and tensor._base is None and
            tensor.storage_offset() == 0 and
            _storage(tensor).nbytes() == tensor.numel() * tensor.element_size() and
            not tensor.is_shared())

