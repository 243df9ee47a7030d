"""What the in-place functions (``Bcast_``, ``Reduce_``) do to their input besides the result.

They overwrite the input's memory, as mpi4torch's do, and return a new
tensor (sharing that memory) whose autograd history is the collective's.
Two things keep autograd from silently computing wrong gradients:

- The daemon writes the bytes behind torch's back, so the input's version
  counter is bumped: a backward that saved the input before the call
  (``y = x * x; Reduce_(x)``) then raises torch's own "modified by an
  inplace operation" error.
- The input, when it has a history (not a leaf), gets a history that raises
  during backward: its value is now the collective's result, so a later use
  of the input instead of the returned tensor would get the wrong gradient.
  mpi4torch does the same (for leaves it cannot: autograd accumulates their
  gradients itself).
"""

import torch

REUSE_ERROR = ('Reuse of a tensor passed to the in-place collective.mpi4torch function {name} '
               'is not supported in backward: its memory holds the result now. Use the '
               'tensor the function returned.')


def overwrite(tensor, values):
    """Makes ``tensor`` hold ``values`` (its own memory when the daemon wrote there) and
    bumps its version counter either way."""
    with torch.no_grad():
        if values.device == tensor.device and values.data_ptr() == tensor.data_ptr():
            # An in-place op on an empty view bumps the version counter the
            # tensor shares with its views and touches no element.
            tensor.view(-1)[:0].zero_()
        else:
            tensor.copy_(values)


class _ReusedInput(torch.autograd.Function):
    """Marks its input as modified in place, with a backward that raises."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.name = name
        ctx.mark_dirty(tensor)
        return tensor

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(REUSE_ERROR.format(name=ctx.name))


def guard(tensor, name):
    """Makes a backward through ``tensor``'s later uses raise (tensors with a history only)."""
    if tensor.requires_grad and tensor.grad_fn is not None and torch.is_grad_enabled():
        _ReusedInput.apply(tensor, name)
