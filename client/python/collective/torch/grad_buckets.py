"""Gradients that live in the client's shared-memory arena, so their allreduce copies nothing in.

An allreduce hands the daemon its input through shared memory: a tensor
elsewhere is first copied into this client's arena by libcollective, a tensor
that already lies there is read where it is. DistributedOptimizer keeps each
gradient in an arena bucket for that reason:

- Buckets are allocated once, when the optimizer is built (``Client.allocate``
  blocks of at most ``BUCKET_BYTES``, one 64-byte-aligned view per gradient,
  in the order the gradients are submitted).
- A gradient moves into its view ("is re-homed") when its allreduce is
  submitted: the hook copies ``p.grad`` into the view and makes the view
  ``p.grad``. That first copy costs what libcollective's copy would have.
  From then on ``optimizer.zero_grad()`` zeroes the view in place and
  autograd's AccumulateGrad, which does ``grad += new`` when ``p.grad`` is
  defined and grad mode is off (torch 1.13 and later), accumulates straight
  into shared memory: no copy in. (torch DDP's ``gradient_as_bucket_view``
  does the same, re-homing included.) Nothing is placed in ``p.grad``
  before the first backward, so a parameter keeps ``p.grad is None`` until
  it has a gradient, and sparse gradients stay sparse.
- ``zero_grad(set_to_none=True)`` gives ``p.grad`` a fresh tensor each
  step; it is re-homed again, a copy each step, which is what the copy path
  costs as well.
- The daemon reads a gradient only after its accumulator's hook submitted
  it, when autograd has finished writing it for this step, and the next
  write (``zero_grad``) is refused until ``step()`` or ``synchronize()`` has
  waited for the result.
- The daemon writes each result into the view it reduced (the output of an
  in-place allreduce that lies in the client's own arena): on one node in
  the same pass, across nodes once the nodes' combination is in. Nothing is
  copied out either.

The buckets are an optimization only: parameters that do not fit (an
optimizer's buckets take at most ``ARENA_SHARE`` of the arena's free space,
which also holds the copies of every other input) or cannot be viewed (non-contiguous, e.g.
channels_last, or of a dtype the daemon does not take), compressed
gradients (the compressor makes a new tensor), sparse gradients, and any
allocation the arena refuses all take the copy path, silently.
"""

import torch

from collective.common import connection as connections
from collective.common.exceptions import HorovodInternalError
from collective.torch import tensor_args

# The share of the arena's free space that one optimizer's buckets may take;
# the rest stays for the copies of inputs that lie elsewhere (parameters
# being broadcast, activations being gathered, gradients that did not fit)
# and for the buckets of other optimizers.
ARENA_SHARE = 0.5
# At most this much per allocation: blocks of a moderate size still fit an
# arena whose free space is split up.
BUCKET_BYTES = 32 << 20
_ALIGNMENT = 64  # libcollective's data alignment: every view starts a cache line


def arena_budget(client):
    """How many bytes of the client's arena the buckets may take."""
    return int(client.arena_free_bytes * ARENA_SHARE)


def viewable(p):
    """Whether a tensor like p can be a view of an arena block, which the daemon reads where it
    is (p's gradient in a bucket; p itself, for arena.to_arena)."""
    return (p.layout == torch.strided and p.device.type == 'cpu' and p.is_contiguous()
            and tensor_args.supported(p.dtype) and p.numel() > 0)


def _aligned(nbytes):
    return -(-nbytes // _ALIGNMENT) * _ALIGNMENT


class GradientBuckets:
    """Arena views for the gradients of ``params`` (in submission order), as many as fit."""

    def __init__(self, params):
        self._views = {}  # parameter -> its gradient's view in a bucket
        self.buffers = []  # the collective._core.Buffer of each bucket
        connection = connections.current()
        budget = arena_budget(connection.client)
        for bucket in _pack([p for p in params if viewable(p)], budget):
            nbytes = sum(_aligned(p.numel() * p.element_size()) for p in bucket)
            try:
                buffer = connection.client.allocate(nbytes)
            except HorovodInternalError:
                break  # the arena is full (or smaller than it said): copy the rest
            offset = 0
            for p in bucket:
                view = torch.frombuffer(buffer, dtype=p.dtype, count=p.numel(), offset=offset)
                self._views[p] = view.view(p.shape).zero_()
                offset += _aligned(p.numel() * p.element_size())
            self.buffers.append(buffer)

    def zeros(self, p):
        """A zero gradient for p: its arena view zeroed, or a new tensor."""
        view = self._views.get(p)
        return torch.zeros_like(p) if view is None else view.zero_()

    def rehome(self, p):
        """Moves p.grad into its view unless it is there already (or cannot go there)."""
        view = self._views.get(p)
        grad = p.grad
        if view is None or grad is None or grad.layout != torch.strided:
            return
        if grad.data_ptr() == view.data_ptr() and grad.is_contiguous():
            return  # accumulated in place: the common case after the first step
        if grad.dtype != view.dtype or grad.shape != view.shape or grad.requires_grad:
            return  # a gradient the user replaced with something else: copy path
        view.copy_(grad)
        p.grad = view


def _pack(params, budget):
    """The params that fit in `budget` bytes, in order, in blocks of at most BUCKET_BYTES."""
    buckets, current, current_bytes, total = [], [], 0, 0
    for p in params:
        nbytes = _aligned(p.numel() * p.element_size())
        if total + nbytes > budget:
            continue  # copy path for this one; a smaller one may still fit
        if current and current_bytes + nbytes > BUCKET_BYTES:
            buckets.append(current)
            current, current_bytes = [], 0
        current.append(p)
        current_bytes += nbytes
        total += nbytes
    if current:
        buckets.append(current)
    return buckets
