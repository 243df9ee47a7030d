"""``WaitHandle``: a non-blocking send or receive that has not been waited for.

Its one tensor, the ``dummy``, is what autograd sees of the request: a small
float64 tensor that names the request (its id, and a mark that arithmetic
would not leave in place). ``Wait`` reads the request from it; in backward,
``Wait``'s adjoint starts the adjoint request and hands it, as such a tensor
again, to the ``Isend``/``Irecv`` that made the handle, whose backward waits
for it. So a dummy must only reach ``Wait``, ``JoinDummies`` and
``JoinDummiesHandle``: any other use changes its value or its gradient,
which is detected and reported.

The table of open requests is shared by the user's thread and autograd's
backward threads; a lock guards it.
"""

import itertools
import threading

import torch

from collective.mpi4torch.dummies import JoinDummies

# The second element of every dummy: adding zeros (JoinDummies' gradients)
# keeps it, anything else is very unlikely to.
_MARK = 0.6180339887498949

BIFURCATION_ERROR = ('collective.mpi4torch: a WaitHandle was used by something other than '
                     'Wait, JoinDummies or JoinDummiesHandle (its dummy reads {values}), so the '
                     'request it stands for is lost. Pass handles, and their dummies, only to '
                     'those.')

NOT_OPEN_ERROR = ('collective.mpi4torch: the request of this WaitHandle (id {id}) is not open: it '
                  'was waited for already, or belongs to a connection that was closed.')

_lock = threading.Lock()
_open = {}  # id -> request (what point_to_point registered)
_ids = itertools.count(1)


def register(request):
    """A new dummy standing for ``request`` (float64, on the CPU)."""
    with _lock:
        request_id = next(_ids)
        _open[request_id] = request
    return torch.tensor([float(request_id), _MARK], dtype=torch.float64)


def take(dummy):
    """The request ``dummy`` stands for, no longer open; None for an all-zero tensor (a
    gradient that only JoinDummies contributed: no adjoint request was started).
    RuntimeError for anything else."""
    values = dummy.detach().to('cpu', torch.float64).reshape(-1).tolist()
    if values and not any(values):
        return None
    if len(values) != 2 or values[1] != _MARK or values[0] != int(values[0]):
        raise RuntimeError(BIFURCATION_ERROR.format(values=values))
    with _lock:
        request = _open.pop(int(values[0]), None)
    if request is None:
        raise RuntimeError(NOT_OPEN_ERROR.format(id=int(values[0])))
    return request


class WaitHandle:
    """A handle returned by ``Isend``/``Irecv``, for ``Wait`` (once)."""

    def __init__(self, raw_handle):
        self._handle = list(raw_handle)

    @property
    def dummy(self):
        """A tensor that stands for the request in ``JoinDummies``/``JoinDummiesHandle``."""
        return self._handle[0]


def JoinDummiesHandle(handle, dummies):  # noqa: N802 (mpi4torch's name)
    """``JoinDummies`` for a ``WaitHandle``: the same request, which autograd then sees as
    depending on ``dummies`` too."""
    return WaitHandle([JoinDummies(handle._handle[0], dummies)] + handle._handle[1:])
