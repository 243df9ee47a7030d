"""mpi4torch 0.1.3's API over collectived: ``import collective.mpi4torch as mpi4torch``.

MPI calls on torch tensors that autograd differentiates through, with
mpi4torch's names, signatures and adjoints: ``COMM_WORLD`` (an
``MPI_Communicator`` with ``rank``, ``size``, ``Allreduce``, ``Bcast_``,
``Reduce_``, ``Gather``, ``Allgather``, ``Scatter``, ``Alltoall``,
``Isend``, ``Irecv``, ``Wait``, ``Send``, ``Recv``), the reduction
constants (``MPI_SUM``, ...), ``WaitHandle``, ``JoinDummies`` and
``JoinDummiesHandle``. Start the processes with a launcher
(``collectiverun -np 4 python train.py``); the first call connects to the
node's daemon (there is no init call, as in mpi4torch). A process set takes
the place of an mpi4py communicator: ``comm_from_process_set``.
TorchScript is not supported (it would need an extension linked with
libtorch).
"""

# torch before collective._core (see collective/__init__.py).
import torch  # noqa: F401  isort:skip

from collective.common.process_sets import global_process_set as _global_process_set
from collective.mpi4torch.communicator import (MPI_Communicator, comm_from_mpi4py,
                                               comm_from_process_set,
                                               deactivate_cuda_aware_mpi_support)
from collective.mpi4torch.dummies import JoinDummies
from collective.mpi4torch.ops import (MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR, MPI_LXOR,
                                      MPI_MAX, MPI_MAXLOC, MPI_MIN, MPI_MINLOC, MPI_PROD, MPI_SUM)
from collective.mpi4torch.wait_handle import JoinDummiesHandle, WaitHandle

COMM_WORLD = MPI_Communicator(_global_process_set)
"""Every rank of the job (MPI's ``MPI_COMM_WORLD``)."""

__all__ = [
    'MPI_MAX', 'MPI_MIN', 'MPI_SUM', 'MPI_PROD', 'MPI_LAND', 'MPI_BAND', 'MPI_LOR', 'MPI_BOR',
    'MPI_LXOR', 'MPI_BXOR', 'MPI_MINLOC', 'MPI_MAXLOC', 'WaitHandle', 'JoinDummies',
    'JoinDummiesHandle', 'MPI_Communicator', 'COMM_WORLD', 'comm_from_mpi4py',
    'comm_from_process_set', 'deactivate_cuda_aware_mpi_support',
]
