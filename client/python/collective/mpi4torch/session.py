"""This process's connection to collectived, opened at first use, and MPI_Finalize's barrier at exit.

mpi4torch has no init call: importing it initializes MPI. Here the first
call that needs the daemon (a communicator's ``rank``, a collective) opens
the connection ``collective.torch.init()`` would open, from the launcher's
environment (``collectiverun``, or mpirun/torchrun with a collectived on the
node), and leaves at exit. A process that called ``collective.torch.init()``
itself shares that connection. Called from the user's thread and from
autograd's backward threads; ``open_connection`` serializes the opening.

Leaving at exit is what MPI_Finalize is to an mpi4torch program: collective.
A rank that reaches the end of its script first waits there for every other
rank, so that a peer still exchanging messages with a third rank (the last
steps of a ring's backward pass) is not failed by the first rank's leaving.
A rank that exits on an uncaught exception leaves at once, and the others'
waiting operations fail with an error that names it (as ``python -m mpi4py``
aborts the job instead of hanging in MPI_Finalize).
"""

import atexit
import sys
import threading

from collective import _core
from collective.common import basics, connection

_finalize_lock = threading.Lock()
_finalize_registered = False
_uncaught_exception = False


def client():
    """The binding's client, connecting first if this process has not joined the job yet."""
    if not connection.is_open():
        basics.init()
    _register_finalize()
    return connection.current().client


def _register_finalize():
    """Registers ``_finalize`` once, after ``basics.init`` registered its shutdown: atexit runs
    the handlers last-registered first, so the barrier comes before the leave."""
    global _finalize_registered
    if _finalize_registered:
        return
    with _finalize_lock:
        if _finalize_registered:
            return
        previous_hook = sys.excepthook

        def note_uncaught(*exc_info):
            global _uncaught_exception
            _uncaught_exception = True
            previous_hook(*exc_info)

        sys.excepthook = note_uncaught
        atexit.register(_finalize)
        _finalize_registered = True


def _finalize():
    """Waits at exit for every rank of the job, unless this process dies of an exception."""
    if _uncaught_exception or not connection.is_open():
        return
    try:
        connection.current().client.barrier(_core.GLOBAL_PROCESS_SET)
    except Exception:  # noqa: BLE001  a peer that died or left: the leave that follows is all
        pass           # that is left to do, and the peers hear of it from the daemon.
