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

A receive writes what it receives into the buffer passed to ``Irecv``/``Recv``,
as mpi4torch does, and ``Wait`` returns a tensor that shares the buffer's
memory (on the buffer's device). A contiguous CPU buffer is received into
where it lies; any other (a CUDA tensor, a non-contiguous view) is written
once the request completes, in ``Wait``. The buffer's gradient is zero: the
received values do not depend on it.
"""

import torch

from collective.torch import handles
from collective.mpi4torch import layout, requests, wait_handle

ADJOINT_TAG_OFFSET = 10


class _Request:
    """An open send or receive: what ``Wait`` and the adjoints need to know of it."""

    __slots__ = ('kind', 'handle', 'peer', 'tag', 'comm', 'template', 'sent', 'buffer')

    def __init__(self, kind, handle, peer, tag, comm, template, sent=None, buffer=None):
        self.kind = kind  # 'send' or 'recv'
        self.handle = handle  # collective.torch.handles' handle
        self.peer = peer
        self.tag = tag
        self.comm = comm
        self.template = template  # (shape, dtype, device) of the tensor sent or received
        self.sent = sent  # for a send: the tensor, which Wait returns
        self.buffer = buffer  # for a user's receive: where the values go (detached)


def _template(tensor):
    return tensor.shape, tensor.dtype, tensor.device


def _start_send(tensor, dest, tag, comm):
    handle = requests.isend(layout.host(tensor), dest, tag, comm.set_id)
    return wait_handle.register(
        _Request('send', handle, dest, tag, comm, _template(tensor), tensor.detach()))


def _start_recv(template, source, tag, comm, buffer=None):
    """Starts a receive of a tensor like ``template``: into ``buffer`` (the user's, detached)
    when given, else into a new tensor (an adjoint's)."""
    shape, dtype, _ = template
    direct = buffer is not None and buffer.device.type == 'cpu' and buffer.is_contiguous()
    output = buffer if direct else torch.empty(shape, dtype=dtype)
    handle = requests.irecv(output, source, tag, comm.set_id)
    return wait_handle.register(_Request('recv', handle, source, tag, comm, template,
                                         buffer=buffer))


def _received(request):
    """Waits for a receive; what it received, in the user's buffer when it has one."""
    received = handles.synchronize(request.handle)
    buffer = request.buffer
    if buffer is None:
        return received.to(request.template[2])
    if received.data_ptr() != buffer.data_ptr():
        # Through .data, as MPI writes the memory: autograd's version count stays.
        buffer.data.copy_(received)
    return buffer.detach()


def _finish_adjoint(dummy_grad):
    """Waits for the adjoint request ``Wait``'s backward started; its Result, or None when
    none was started."""
    if dummy_grad is None:
        return None
    request = wait_handle.take(dummy_grad)
    if request is None:
        return None
    if request.kind == 'recv':
        return _received(request)
    handles.synchronize(request.handle)
    return request.sent


class Isend(torch.autograd.Function):
    """Starts a send (``MPI_Communicator.Isend``); its output is the handle's dummy."""

    @staticmethod
    def forward(ctx, tensor, dest, tag, comm):
        """Starts sending ``tensor`` to ``dest``; returns the dummy naming the request."""
        ctx.set_materialize_grads(False)
        return _start_send(tensor, dest, tag, comm)

    @staticmethod
    def backward(ctx, dummy_grad):
        """The gradient of the tensor sent: what the destination sends back (the adjoint receive
        ``Wait``'s backward started), or None."""
        return _finish_adjoint(dummy_grad), None, None, None


class Irecv(torch.autograd.Function):
    """Starts a receive into a buffer (``MPI_Communicator.Irecv``); its output is the handle's
    dummy."""

    @staticmethod
    def forward(ctx, buffer, source, tag, comm):
        """Starts receiving from ``source`` into ``buffer``; returns the request's dummy."""
        ctx.set_materialize_grads(False)
        ctx.template = _template(buffer)
        # Written without autograd knowing, as MPI writes mpi4torch's buffer.
        return _start_recv(ctx.template, source, tag, comm, buffer.detach())

    @staticmethod
    def backward(ctx, dummy_grad):
        """Waits for the adjoint send ``Wait``'s backward started; the buffer's gradient is zero."""
        if _finish_adjoint(dummy_grad) is None:
            return None, None, None, None
        shape, dtype, device = ctx.template
        return torch.zeros(shape, dtype=dtype, device=device), None, None, None


class Wait(torch.autograd.Function):
    """Completes a send or a receive (``MPI_Communicator.Wait``)."""

    @staticmethod
    def forward(ctx, dummy, comm):
        """Waits for the request ``dummy`` names: the tensor received (the buffer's memory), or for
        a send the tensor sent."""
        request = wait_handle.take(dummy)
        if request is None:
            raise RuntimeError(wait_handle.BIFURCATION_ERROR.format(values=dummy.tolist()))
        if request.comm.set_id != comm.set_id:
            handles.discard(request.handle)
            raise ValueError('Wait was called on another communicator than the request was '
                             'started on.')
        ctx.request = request
        if request.kind == 'send':
            handles.synchronize(request.handle)
            return request.sent
        return _received(request)

    @staticmethod
    def backward(ctx, grad):
        """Starts the adjoint request (a receive of the gradient for a send, a send of ``grad`` for
        a receive) and hands it to the Isend/Irecv that started the request, as its dummy's
        gradient."""
        request = ctx.request
        tag = request.tag + ADJOINT_TAG_OFFSET
        if request.kind == 'send':
            # The destination sends back the gradient of what it received.
            return _start_recv(request.template, request.peer, tag, request.comm), None
        return _start_send(grad, request.peer, tag, request.comm), None


def isend(comm, tensor, dest, tag):
    """``comm.Isend``: the WaitHandle of a send of ``tensor`` to ``dest``."""
    return wait_handle.WaitHandle([Isend.apply(tensor, dest, tag, comm)])


def irecv(comm, buffer, source, tag):
    """``comm.Irecv``: the WaitHandle of a receive from ``source`` into ``buffer``."""
    return wait_handle.WaitHandle([Irecv.apply(buffer, source, tag, comm)])


def wait(comm, handle):
    """``comm.Wait``: completes the request of ``handle`` (a WaitHandle); ValueError for anything
    else."""
    if not isinstance(handle, wait_handle.WaitHandle):
        raise ValueError(f'Wait takes a WaitHandle (from Isend or Irecv), not '
                         f'{type(handle).__name__}.')
    return Wait.apply(handle.dummy, comm)
