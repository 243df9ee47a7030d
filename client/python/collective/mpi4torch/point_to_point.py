"""mpi4torch's point-to-point functions as autograd functions, with mpi4torch's adjoints.

``Isend``/``Irecv`` start a request and return its ``WaitHandle``; ``Wait``
completes it: for a receive it returns the tensor received, for a send the
tensor sent (a dummy for ``JoinDummies``, as in mpi4torch). The adjoint of
a send to rank d is a receive from d, of a receive from rank s a send to s;
the adjoint messages carry the tag plus ``ADJOINT_TAG_OFFSET`` (mpi4torch's
10). In backward, ``Wait``'s adjoint starts the adjoint request and the
``Isend``/``Irecv`` that made the handle waits for it, so that the backward
pass stays non-blocking where the forward pass was (the Isend -> Recv ->
Wait ring runs backward without deadlock).

A receive's buffer gives the shape and dtype of what is received; the
values come back from ``Wait`` (the buffer is not written), and its
gradient is zero: the received values do not depend on it.
"""

import torch

from collective.torch import handles
from collective.mpi4torch import layout, requests, wait_handle

ADJOINT_TAG_OFFSET = 10


class _Request:
    """An open send or receive: what ``Wait`` and the adjoints need to know of it."""

    __slots__ = ('kind', 'handle', 'peer', 'tag', 'comm', 'template', 'sent')

    def __init__(self, kind, handle, peer, tag, comm, template, sent=None):
        self.kind = kind  # 'send' or 'recv'
        self.handle = handle  # collective.torch.handles' handle
        self.peer = peer
        self.tag = tag
        self.comm = comm
        self.template = template  # (shape, dtype, device) of the tensor sent or received
        self.sent = sent  # for a send: the tensor, which Wait returns


def _template(tensor):
    return tensor.shape, tensor.dtype, tensor.device


def _start_send(tensor, dest, tag, comm):
    handle = requests.isend(layout.host(tensor), dest, tag, comm.set_id)
    return wait_handle.register(
        _Request('send', handle, dest, tag, comm, _template(tensor), tensor.detach()))


def _start_recv(template, source, tag, comm):
    shape, dtype, _ = template
    handle = requests.irecv(torch.empty(shape, dtype=dtype), source, tag, comm.set_id)
    return wait_handle.register(_Request('recv', handle, source, tag, comm, template))


def _finish_adjoint(dummy_grad):
    """Waits for the adjoint request ``Wait``'s backward started; its Result, or None when
    none was started."""
    if dummy_grad is None:
        return None
    request = wait_handle.take(dummy_grad)
    if request is None:
        return None
    received = handles.synchronize(request.handle)
    return received.to(request.template[2]) if request.kind == 'recv' else request.sent


class Isend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, dest, tag, comm):
        ctx.set_materialize_grads(False)
        return _start_send(tensor, dest, tag, comm)

    @staticmethod
    def backward(ctx, dummy_grad):
        # The gradient sent back by the destination.
        return _finish_adjoint(dummy_grad), None, None, None


class Irecv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, buffer, source, tag, comm):
        ctx.set_materialize_grads(False)
        ctx.template = _template(buffer)
        return _start_recv(ctx.template, source, tag, comm)

    @staticmethod
    def backward(ctx, dummy_grad):
        if _finish_adjoint(dummy_grad) is None:
            return None, None, None, None
        shape, dtype, device = ctx.template
        return torch.zeros(shape, dtype=dtype, device=device), None, None, None


class Wait(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dummy, comm):
        request = wait_handle.take(dummy)
        if request is None:
            raise RuntimeError(wait_handle.BIFURCATION_ERROR.format(values=dummy.tolist()))
        if request.comm.set_id != comm.set_id:
            handles.discard(request.handle)
            raise ValueError('Wait was called on another communicator than the request was '
                             'started on.')
        received = handles.synchronize(request.handle)
        ctx.request = request
        if request.kind == 'send':
            return request.sent
        return received.to(request.template[2])

    @staticmethod
    def backward(ctx, grad):
        request = ctx.request
        tag = request.tag + ADJOINT_TAG_OFFSET
        if request.kind == 'send':
            # The destination sends back the gradient of what it received.
            return _start_recv(request.template, request.peer, tag, request.comm), None
        return _start_send(grad, request.peer, tag, request.comm), None


def isend(comm, tensor, dest, tag):
    return wait_handle.WaitHandle([Isend.apply(tensor, dest, tag, comm)])


def irecv(comm, buffer, source, tag):
    return wait_handle.WaitHandle([Irecv.apply(buffer, source, tag, comm)])


def wait(comm, handle):
    if not isinstance(handle, wait_handle.WaitHandle):
        raise ValueError(f'Wait takes a WaitHandle (from Isend or Irecv), not '
                         f'{type(handle).__name__}.')
    return Wait.apply(handle.dummy, comm)
