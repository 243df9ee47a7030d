"""This process's connection to collectived, opened at first use.

mpi4torch has no init call: importing it initializes MPI. Here the first
call that needs the daemon (a communicator's ``rank``, a collective) opens
the connection ``collective.torch.init()`` would open, from the launcher's
environment (``collectiverun``, or mpirun/torchrun with a collectived on the
node), and leaves at exit. A process that called ``collective.torch.init()``
itself shares that connection. Called from the user's thread and from
autograd's backward threads; ``open_connection`` serializes the opening.
"""

from collective.common import basics, connection


def client():
    """The binding's client, connecting first if this process has not joined the job yet."""
    if not connection.is_open():
        basics.init()
    return connection.current().client
