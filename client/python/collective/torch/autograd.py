"""Gradients of the collectives, as Horovod defines them.

- allreduce: the gradient is allreduced with the same op and scale factors.
- allgather: the gradient is averaged over the ranks and each rank takes the
  rows of its own input.
- broadcast: the gradient is averaged over the ranks; the root receives it,
  every other rank's input had no effect and gets zeros.
- alltoall: the gradient goes back where the rows came from (an alltoall with
  the received splits).
- reducescatter: the gradient is allgathered, times the set's size for Sum,
  times the scale factors.

Backward passes call the collectives again, with auto-generated names, so
every rank must run the same backward passes in the same order. Each
backward is itself differentiable.
"""

import torch

from collective.common import basics
from collective.common import reduce_ops
from collective.common.reduce_ops import Average, Sum
from collective.torch import async_ops
from collective.torch.handles import synchronize


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce of one tensor (Horovod's arguments; ``average`` is the deprecated form of ``op``)."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        """The reduced tensor (``allreduce``'s); remembers the op and scale factors for backward."""
        op = reduce_ops.resolve_op(op, average)
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        output = async_ops.allreduce_now(tensor, name, op, prescale_factor, postscale_factor,
                                         process_set)
        if output is not None:
            return output
        return synchronize(async_ops.allreduce_async(
            tensor, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        """The gradient's allreduce with the same op and scale factors, as Horovod's."""
        grad = HorovodAllreduce.apply(grad_output, None, None, ctx.op, ctx.prescale_factor,
                                      ctx.postscale_factor, ctx.process_set)
        return grad, None, None, None, None, None, None


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Allreduce of a group of tensors (the tensors come last, as autograd needs)."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        """The reduced tensors, as a tuple (``grouped_allreduce``'s)."""
        op = reduce_ops.resolve_op(op, average)
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(async_ops.grouped_allreduce_async(
            tensors, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        """The gradients' grouped allreduce with the same op and scale factors."""
        grads = HorovodGroupedAllreduce.apply(None, None, ctx.op, ctx.prescale_factor,
                                              ctx.postscale_factor, ctx.process_set,
                                              *grad_outputs)
        return (None, None, None, None, None, None) + tuple(grads)


def _own_rows(grad, rows, process_set):
    """This rank's block of ``grad``, given its number of rows, found by gathering everyone's."""
    counts = synchronize(async_ops.allgather_async(torch.tensor([rows], dtype=torch.int64),
                                                   process_set=process_set))
    offset = int(counts[:process_set.rank()].sum())
    return grad.narrow(0, offset, rows)


class HorovodAllgather(torch.autograd.Function):
    """Allgather of one tensor."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        """Every rank's rows (``allgather``'s); remembers this rank's count of rows."""
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 0
        ctx.process_set = process_set
        return synchronize(async_ops.allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        """The average of every rank's gradient, narrowed to the rows this rank gave."""
        averaged = HorovodAllreduce.apply(grad_output, None, None, Average, 1.0, 1.0,
                                          ctx.process_set)
        return _own_rows(averaged, ctx.rows, ctx.process_set), None, None


class HorovodGroupedAllgather(torch.autograd.Function):
    """Allgather of a group of tensors."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        """Every rank's rows of each tensor, as a tuple (``grouped_allgather``'s)."""
        ctx.rows = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(async_ops.grouped_allgather_async(tensors, name=name,
                                                                   process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        """For each tensor, the averaged gradient narrowed to this rank's rows."""
        averaged = HorovodGroupedAllreduce.apply(None, None, Average, 1.0, 1.0, ctx.process_set,
                                                 *grad_outputs)
        return (None, None) + tuple(_own_rows(g, rows, ctx.process_set)
                                    for g, rows in zip(averaged, ctx.rows))


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast of one tensor from a (global) root rank."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        """The root's tensor (``broadcast``'s)."""
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(async_ops.broadcast_async(tensor, root_rank, name=name,
                                                     process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        """The gradients' average on the root, zeros on the other ranks, as Horovod's."""
        averaged = HorovodAllreduce.apply(grad_output, None, None, Average, 1.0, 1.0,
                                          ctx.process_set)
        if basics.rank() != ctx.root_rank:
            averaged = torch.zeros_like(averaged)
        return averaged, None, None, None


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall; returns the received splits too when splits were given, as Horovod does."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        """The rows received (and, when splits were given, the received splits)."""
        output, received_splits = synchronize(async_ops.alltoall_async(
            tensor, splits=splits, name=name, process_set=process_set))
        ctx.received_splits = received_splits
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *_received_splits_grad):
        """The gradient sent back where its rows came from: an alltoall by the received splits."""
        grad, _ = HorovodAlltoall.apply(grad_output, ctx.received_splits, None, ctx.process_set)
        return grad, None, None, None


def _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor):
    return (process_set.size() if op == Sum else 1) * prescale_factor * postscale_factor


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter of one tensor."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        """This rank's rows of the reduction (``reducescatter``'s)."""
        ctx.scale = _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return synchronize(async_ops.reducescatter_async(
            tensor, name=name, op=op, process_set=process_set, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        """Every rank's gradient rows gathered, scaled as the forward scaled."""
        grad = HorovodAllgather.apply(grad_output * ctx.scale, None, ctx.process_set)
        return grad, None, None, None, None, None


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Reducescatter of a group of tensors."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        """This rank's rows of each reduction, as a tuple."""
        ctx.scale = _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return tuple(synchronize(async_ops.grouped_reducescatter_async(
            tensors, name=name, op=op, process_set=process_set, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        """Every rank's gradient rows of each tensor gathered, scaled as the forward scaled."""
        grads = HorovodGroupedAllgather.apply(None, ctx.process_set,
                                              *[g * ctx.scale for g in grad_outputs])
        return (None, None, None, None, None) + tuple(grads)
