"""Tensors as the daemon takes them, and its results back as the caller's tensors.

The daemon reads dense, contiguous host memory and splits or concatenates
along the first dimension. mpi4torch's functions work along any axis of
tensors on any device: the axis is moved to the front (``rows``) and back
(``from_rows``), and tensors on other devices travel through host copies,
as mpi4torch does without CUDA-aware MPI.
"""

import torch

from collective.torch import tensor_args


def host(tensor):
    """``tensor``'s values as a contiguous CPU tensor without autograd history (no copy when
    it is one already); ValueError for dtypes or layouts the daemon does not take."""
    tensor = tensor.detach()
    tensor_args.check(tensor)
    return tensor.to('cpu').contiguous()


def axis_of(axis, ndim, what):
    """``axis`` (negative counts from the end) as an index below ``ndim``; ValueError if none."""
    if not isinstance(axis, int) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise ValueError(f'{what} {axis!r} is not an axis of a tensor with {ndim} dimensions.')
    return axis % ndim


def rows(tensor, axis):
    """``tensor`` with ``axis`` first, contiguous on the host: its rows along ``axis``."""
    return host(tensor.detach().movedim(axis, 0))


def from_rows(rows_tensor, axis, device):
    """The inverse of ``rows``: ``axis`` back in place, on ``device``."""
    return rows_tensor.movedim(0, axis).contiguous().to(device)
