"""``JoinDummies``: dependencies that autograd cannot see, made visible to it.

Each rank's backward graph knows nothing of the other ranks: that a receive
must wait for a send, or a Wait for a receive, is the program's to say. In
the forward pass ``JoinDummies(x, dummies)`` is ``x``; in the backward pass
it makes autograd treat ``x`` as computed from the dummies, so what produced
them runs its backward after whatever consumed ``x`` (their gradients are
zeros). Dummies are any tensors: the results of collectives, or a
``WaitHandle``'s ``dummy``.
"""

import torch


class _JoinDummies(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loopthrough, *dummies):
        ctx.templates = [(d.shape, d.dtype, d.device) for d in dummies]
        return loopthrough.detach()

    @staticmethod
    def backward(ctx, grad):
        zeros = [torch.zeros(shape, dtype=dtype, device=device)
                 for shape, dtype, device in ctx.templates]
        return (grad, *zeros)


def JoinDummies(loopthrough, dummies):  # noqa: N802 (mpi4torch's name)
    """``loopthrough``, which autograd then sees as depending on the tensors ``dummies`` too.

    Returns ``loopthrough`` itself when no dummy requires a gradient (nothing
    to join), as mpi4torch does; otherwise a tensor sharing its memory.
    """
    dummies = list(dummies)
    for dummy in dummies:
        if not isinstance(dummy, torch.Tensor):
            raise ValueError(f'JoinDummies takes a list of tensors as dummies, not '
                             f'{type(dummy).__name__} (a WaitHandle gives its .dummy).')
    if not any(d.requires_grad for d in dummies):
        return loopthrough
    return _JoinDummies.apply(loopthrough, *dummies)
