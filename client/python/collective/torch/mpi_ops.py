"""Horovod's ``horovod.torch.mpi_ops`` over collectived: the collectives on torch tensors.

The synchronous, differentiable forms live here; the asynchronous and
in-place ones in ``async_ops``, their gradients in ``autograd``. Everything
is re-exported by ``collective.torch``.
"""

import torch

from collective.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                      gloo_built, gloo_enabled, init, is_homogeneous,
                                      is_initialized, local_rank, local_size, mpi_built,
                                      mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                      rocm_built, shutdown, size, start_timeline, stop_timeline)
from collective.common.exceptions import HorovodInternalError
from collective.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                            remove_process_set)
from collective.common import reduce_ops
from collective.torch import async_ops
# The autograd functions, by the names horovod.torch.mpi_ops gives them.
from collective.torch.autograd import (HorovodAllgather, HorovodAllreduce, HorovodAlltoall,
                                       HorovodBroadcast, HorovodGroupedAllgather,
                                       HorovodGroupedAllreduce, HorovodGroupedReducescatter,
                                       HorovodReducescatter)
from collective.torch.async_ops import (allgather_async, allreduce_, allreduce_async,
                                        allreduce_async_, alltoall_async, barrier, broadcast_,
                                        broadcast_async, broadcast_async_, grouped_allgather_async,
                                        grouped_allreduce_, grouped_allreduce_async,
                                        grouped_allreduce_async_, grouped_reducescatter_async,
                                        join, reducescatter_async, sparse_allreduce_async)
from collective.torch.compression import Compression
from collective.torch.handles import poll, synchronize
from collective.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum

# Horovod's helper: the op meant by `op` and the deprecated `average` flag.
handle_average_backwards_compatibility = reduce_ops.resolve_op

__all__ = [
    'init', 'shutdown', 'is_initialized', 'size', 'local_size', 'cross_size', 'rank',
    'local_rank', 'cross_rank', 'is_homogeneous', 'mpi_threads_supported', 'mpi_enabled',
    'mpi_built', 'gloo_enabled', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built',
    'cuda_built', 'rocm_built', 'start_timeline', 'stop_timeline',
    'HorovodInternalError',
    'ProcessSet', 'global_process_set', 'add_process_set', 'remove_process_set',
    'Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product',
    'allreduce', 'allreduce_async', 'allreduce_', 'allreduce_async_',
    'grouped_allreduce', 'grouped_allreduce_async', 'grouped_allreduce_',
    'grouped_allreduce_async_', 'sparse_allreduce_async',
    'allgather', 'allgather_async', 'grouped_allgather', 'grouped_allgather_async',
    'broadcast', 'broadcast_async', 'broadcast_', 'broadcast_async_',
    'alltoall', 'alltoall_async',
    'reducescatter', 'reducescatter_async', 'grouped_reducescatter',
    'grouped_reducescatter_async',
    'join', 'barrier', 'poll', 'synchronize',
]


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """
    A function that performs averaging or summation of the input tensor over all the
    processes of the process set. The input tensor is not modified.

    The reduction is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    This acts as a thin wrapper around an autograd function. If your input
    tensor requires gradients, then calling this function will allow gradients
    to be computed and backpropagated.

    Arguments:
        tensor: A tensor to reduce.
        average: DEPRECATED, use `op` instead.
        name: A name of the reduction operation.
        compression: Compression algorithm used during allreduce to reduce the amount
                     of data sent during each parameter update step. Defaults to
                     not using compression.
        op: The reduction operation to combine tensors across different ranks:
            Average (the default when None is given), Sum, Min, Max or Product.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        A tensor of the same shape and type as `tensor`, reduced across all processes.
    """
    op = reduce_ops.resolve_op(op, average)
    if (compression is Compression.none and isinstance(tensor, torch.Tensor)
            and not (tensor.requires_grad and torch.is_grad_enabled())):
        # No gradient to record: what the autograd function would return, without its cost.
        reduced = async_ops.allreduce_now(tensor, name, op, prescale_factor, postscale_factor,
                                          process_set)
        if reduced is not None:
            return reduced
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, None, name, op, prescale_factor,
                                     postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """
    A function that performs averaging or summation of a list of tensors over all the
    processes of the process set, as one group. The input tensors are not modified.

    The reductions are keyed by the base name (auto-generated when not given) and
    the position in the list: tensors at the same position must have the same type
    and shape on all processes. Differentiable, like `allreduce`.

    Arguments:
        tensors: A list of tensors to reduce.
        average: DEPRECATED, use `op` instead.
        name: A base name to use for the group reduction operation.
        compression: Compression algorithm applied to each tensor.
        op, prescale_factor, postscale_factor, process_set: As for `allreduce`.

    Returns:
        A list of tensors of the same shapes and types as `tensors`, reduced across
        all processes.
    """
    op = reduce_ops.resolve_op(op, average)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = HorovodGroupedAllreduce.apply(None, name, op, prescale_factor, postscale_factor,
                                            process_set, *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


def allgather(tensor, name=None, process_set=global_process_set):
    """
    A function that concatenates the input tensor with the same input tensor on
    all other processes of the process set. The input tensor is not modified.

    The concatenation is done on the first dimension, so the input tensors on the
    different processes must have the same rank and shape, except for the first
    dimension, which is allowed to be different. Differentiable.

    Arguments:
        tensor: A tensor to allgather.
        name: A name of the allgather operation.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        A tensor of the same type as `tensor`, concatenated on dimension zero
        across all processes. The shape is identical to the input shape, except for
        the first dimension, which may be greater and is the sum of all first
        dimensions of the tensors in the different processes.
    """
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """
    A function that concatenates each tensor of a list with the tensors at the same
    position on all other processes of the process set, as one group. Differentiable.

    Arguments:
        tensors: A list of tensors to allgather.
        name: A base name to use for the group allgather operation.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        A tuple of tensors, each concatenated on dimension zero across all processes.
    """
    return HorovodGroupedAllgather.apply(name, process_set, *tensors)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """
    A function that broadcasts the input tensor on root rank to the same input tensor
    on all other processes of the process set. The input tensor is not modified.

    The broadcast is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    processes for a given name. The broadcast will not start until all processes
    are ready to send and receive the tensor. Differentiable.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The (global) rank to broadcast the value from; it must be a
                   member of the process set.
        name: A name of the broadcast operation.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        A tensor of the same shape and type as `tensor`, with the value broadcast
        from root rank.
    """
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """
    A function that scatters slices of the input tensor to all other processes of the
    process set and returns a tensor of gathered slices from all of them. The input
    tensor is not modified.

    The slicing is done on the first dimension, so the input tensors on
    the different processes must have the same rank and shape, except for the
    first dimension, which is allowed to be different. Differentiable.

    Arguments:
        tensor: A tensor to distribute with alltoall.
        splits: An int32 tensor (or a list) of integers in rank order describing how many
                rows of `tensor` to send to each process of the set. If not
                provided, the first dimension is split equally among them.
        name: A name of the alltoall operation.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        1) A tensor containing the gathered tensor data from all processes.
        2) If `splits` has been provided: a tensor of integers in rank order
           describing how many rows of the output were received from each process.
    """
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """
    A function that reduces the input tensor over all the processes of the process
    set and scatters the result: each process receives its block of rows. The input
    tensor is not modified. Differentiable.

    Arguments:
        tensor: A tensor to reduce and scatter.
        name: A name of the reducescatter operation.
        compression: Compression algorithm used during the reduction.
        op: The reduction operation: Average (the default) or Sum.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.
        prescale_factor: Multiplicative factor to scale tensor before the reduction.
        postscale_factor: Multiplicative factor to scale the result after it.

    Returns:
        A tensor of the same rank and type as `tensor`, holding this process's rows:
        the first dimension is divided among the processes (the first (rows mod size)
        ones get one row more).
    """
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """
    A function that reduces and scatters a list of tensors over all the processes of
    the process set, as one group. Differentiable.

    Arguments:
        tensors: A list of tensors to reduce and scatter.
        name: A base name to use for the group operation.
        compression: Compression algorithm applied to each tensor.
        op, process_set, prescale_factor, postscale_factor: As for `reducescatter`.

    Returns:
        A list of tensors, each holding this process's rows of the reduced tensor.
    """
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                postscale_factor, *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]
