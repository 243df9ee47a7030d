"""Tensors that live in this process's shared-memory arena: ``hvd.empty`` and ``hvd.zeros``.

A collective's input that lies in the arena reaches the daemon where it is; any other
tensor is first copied there by libcollective (and that copy is most of what the Python
path costs over the C++ one for large tensors). Buffers a trainer reduces or broadcasts
again and again (gradient buckets of its own, statistics, a model's parameters that it
broadcasts) can be allocated here instead of with ``torch.empty``::

    flat = hvd.zeros(1 << 20)            # float32, in the arena
    ...                                  # fill it (views of it are in the arena too)
    hvd.allreduce_(flat, op=hvd.Sum)     # read in place: nothing copied in

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

import math

import torch

from collective.common import connection as connections


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

