"""How a collective.mpi4torch program leaves the job at exit (README "No init call").

    collectiverun -np 3 python3 mpi4torch_exit_check.py finalize
        Rank 0 reaches the end of its script while ranks 1 and 2 still
        exchange messages. As MPI_Finalize, rank 0's exit waits for them, so
        every exchange succeeds (if rank 0 left at once, the job would end
        under them). Prints "exit check: finalize ok" on the last rank.

    collectiverun -np 3 python3 mpi4torch_exit_check.py exception
        Rank 0 dies of an uncaught exception while the others wait for its
        message. It must leave at once rather than wait for them at exit
        (they would wait for each other for ever); collectiverun then ends
        the job with rank 0's exit code; the others' receives fail with an
        error that names rank 0.

Rank 0 tells the last rank that it has reached its exit through a FIFO that
the last rank creates before an Allreduce every rank joins: opening a FIFO
blocks until the other end opens it, so nothing polls.
"""

import atexit
import os
import sys
import tempfile

import torch

import collective.mpi4torch as mpi4torch

EXCHANGES = 20


def fifo_path():
    job = os.environ['COLLECTIVE_JOB_ID']
    return os.path.join(tempfile.gettempdir(), f'mpi4torch-exit-check-{job}.fifo')


def signal_exit_reached():
    with open(fifo_path(), 'w') as fifo:
        fifo.write('at exit\n')


def wait_for_exit_reached():
    with open(fifo_path()) as fifo:
        assert fifo.read() == 'at exit\n'
    os.unlink(fifo_path())


def exchange(comm, peer, rounds):
    """Sends this rank's number to ``peer`` and receives the peer's, ``rounds`` times."""
    for step in range(rounds):
        mine = torch.tensor([float(comm.rank + step)])
        if comm.rank < peer:
            comm.Send(mine, peer, step)
            theirs = comm.Recv(torch.empty(1), peer, step)
        else:
            theirs = comm.Recv(torch.empty(1), peer, step)
            comm.Send(mine, peer, step)
        assert theirs.item() == float(peer + step), (theirs.item(), peer, step)


def finalize(comm):
    last = comm.size - 1
    if comm.rank == last:
        os.mkfifo(fifo_path())
    comm.Allreduce(torch.ones(1), mpi4torch.MPI_SUM)  # the FIFO exists from here on
    if comm.rank == 0:
        # Registered after the connection's own exit handler, so it runs first.
        atexit.register(signal_exit_reached)
        return
    if comm.rank == last:
        wait_for_exit_reached()
    exchange(comm, 1 if comm.rank == last else last, EXCHANGES)
    if comm.rank == last:
        print('exit check: finalize ok', flush=True)


def exception(comm):
    comm.Allreduce(torch.ones(1), mpi4torch.MPI_SUM)  # every rank has joined
    if comm.rank == 0:
        raise RuntimeError('rank 0 fails on purpose')
    try:
        comm.Recv(torch.empty(1), 0, 0)  # never sent: fails when rank 0 leaves
    except Exception as error:  # noqa: BLE001  whatever it is, it must name rank 0
        assert 'rank 0' in str(error), error
        print(f'exit check: rank {comm.rank} heard: {error}', flush=True)
        return
    raise AssertionError('a receive from rank 0, which sent nothing, completed')


def main():
    comm = mpi4torch.COMM_WORLD
    if comm.size < 3:
        raise SystemExit('run on 3 ranks or more')
    {'finalize': finalize, 'exception': exception}[sys.argv[1]](comm)


if __name__ == '__main__':
    main()
