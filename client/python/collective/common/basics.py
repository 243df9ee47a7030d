"""Horovod's basics: ``init``, ``shutdown``, what the job looks like and what this build offers.

One connection per process (``collective.common.connection``), as in
Horovod: ``init()`` registers with the
node's daemon (where, and as which local rank, comes from the launcher's
environment: ``COLLECTIVE_SOCKET``, ``COLLECTIVE_LOCAL_RANK``/``_SIZE``,
``COLLECTIVE_JOB_ID``, ...) and waits until every rank of the job has done
the same.
"""

import atexit
import os

from collective import _core
from collective.common import connection
from collective.common import elastic_rendezvous
from collective.common import process_sets as sets
from collective.common.exceptions import HorovodInternalError

_atexit_registered = False


def init(comm=None, process_sets=None):
    """Connects this process to collectived and waits until the whole job has formed.

    Arguments:
        comm: ``None``, or as in Horovod a list of ranks that must then be
              every rank of the job (an empty list means the same): the
              launcher's processes form the job, so a subset, or an MPI
              communicator, raises NotImplementedError.
        process_sets: Process sets to create when the job forms, as
                      ``ProcessSet`` objects or lists of ranks; every rank must
                      pass the same ones. ``None`` or ``"dynamic"``: none
                      (process sets can always be added later with
                      ``add_process_set``).

    Calling ``init()`` again while initialized changes nothing; process sets
    it names must then exist already.
    """
    global _atexit_registered
    if comm is not None:
        if isinstance(comm, (str, bytes)) or not hasattr(comm, '__iter__'):
            raise NotImplementedError(
                'init(comm=...) takes no MPI communicator: collectived forms the job from the '
                'launcher (collectiverun, mpirun, torchrun, ...)')
        comm = list(comm)
    requested = sets.requested_process_sets(process_sets)
    if not connection.is_open():
        # In an elastic job: the latest generation, once the one before has left.
        elastic_rendezvous.join_latest_generation()
    connected = connection.open_connection(
        [list(s.ranks) for s in requested],
        _connect_elastic if elastic_rendezvous.directory() is not None else None)
    if connected and not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True
    job_size = connection.current().client.size
    if comm and sorted(comm) != list(range(job_size)):
        if connected:
            shutdown()
        raise NotImplementedError(
            f'init(comm={comm}): comm must list every rank of the job (0 to {job_size - 1}) '
            'or none; collectived forms the job from every process the launcher started')
    sets.bind_process_sets(requested)


def _connect_elastic(static_process_sets):
    """Connects to the latest generation of an elastic job, again whenever a failure supersedes
    the one it waits to form (a member that died before registering)."""
    retry = elastic_rendezvous.Backoff()
    while True:
        cancellation = _core.ConnectCancellation()
        try:
            client = elastic_rendezvous.connect_unless_superseded(
                lambda: _core.Client.connect(static_process_sets=static_process_sets,
                                             cancellation=cancellation), cancellation)
        except HorovodInternalError as error:
            # The daemon has not yet taken in that another survivor gave up
            # the superseded generation: moments away.
            if not elastic_rendezvous.refused_for_an_earlier_generation(str(error)):
                raise
            retry.wait(str(error))
            continue
        if client is not None:
            return client
        # The others of the superseded generation first give it up.
        elastic_rendezvous.join_latest_generation(after_superseded=True)


def shutdown():
    """Leaves the job; requests not yet synchronized are abandoned. ``init()`` may connect again."""
    if connection.close_connection():
        sets.invalidate_process_sets()


def is_initialized():
    """Returns True once ``init()`` has connected this process and until ``shutdown()``."""
    return connection.is_open()


def size():
    """The number of processes in the job."""
    return connection.current().client.size


def local_size():
    """The number of processes of the job on this node."""
    return connection.current().client.local_size


def cross_size():
    """The number of nodes of the job (processes with this local rank)."""
    return connection.current().client.cross_size


def rank():
    """This process's rank in the job, from 0 to ``size() - 1``."""
    return connection.current().client.rank


def local_rank():
    """This process's rank on its node."""
    return connection.current().client.local_rank


def cross_rank():
    """The index of this process's node in the job."""
    return connection.current().client.cross_rank


def is_homogeneous():
    """True when every node runs the same number of processes."""
    return connection.current().client.is_homogeneous


def start_timeline(file_path, mark_cycles=False):
    """Starts this job's timeline (Chrome trace JSON), written to ``file_path``.

    It records this job alone, on a daemon shared by several jobs too.

    Arguments:
        file_path: Where to write it; relative paths are taken from this
                   process's working directory.
        mark_cycles: Also mark the coordinator's cycles.
    """
    connection.current().client.start_timeline(os.path.abspath(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops the timeline started by ``start_timeline`` and closes its file."""
    connection.current().client.stop_timeline()


# What this build offers. Trainers never run MPI, Gloo, NCCL, DDL or oneCCL
# themselves (the daemon owns the transports). CUDA tensors need two things
# at run time: the NVIDIA driver in this process (libcollective loads
# libcuda.so.1 when it first sees one; it links no CUDA library) and a
# daemon built with CUDA and NCCL, which says so when this process joins.

def mpi_enabled():
    """False: this process never runs MPI; collectived owns the transports."""
    return False


def mpi_built():
    """False: collective.torch is not built against MPI (the daemon is)."""
    return False


def mpi_threads_supported():
    """Raises ValueError in Horovod's words for a process where MPI is not enabled, as every
    process is here: collectived runs the transports, so MPI multi-threading does not apply."""
    raise ValueError('Horovod MPI is not enabled; Please make sure it\'s installed and enabled.')


def gloo_enabled():
    """False: collectived does not use Gloo."""
    return False


def gloo_built():
    """False: collectived does not use Gloo."""
    return False


def nccl_built():
    """Returns the NCCL_VERSION_CODE of the NCCL this build's GPU path was built with (an
    int, e.g. 22809 for NCCL 2.28.9), or 0 when it has no GPU path; as Horovod's, whose
    suite compares it with versions (``hvd.nccl_built() < 2700``).

    Callable before ``init()``, as in Horovod. The daemon does the GPU work:
    once ``init()`` has joined a daemon without the GPU path (one from another
    build), it is 0.
    """
    if connection.is_open() and not connection.current().client.daemon_gpu_path:
        return 0
    return int(_core.NCCL_VERSION_CODE)


def ddl_built():
    """False: DDL is not supported."""
    return False


def ccl_built():
    """False: oneCCL is not supported."""
    return False


def cuda_built():
    """Whether collective.torch takes CUDA tensors in this process.

    True when libcollective can load the NVIDIA driver (libcuda.so.1, with
    every function it uses) and, once ``init()`` has connected, the daemon
    was built with CUDA and NCCL. Before ``init()`` only the driver is known;
    ``cuda_driver_error()`` says why the driver cannot be used. Machines
    without an NVIDIA driver answer False.
    """
    if _core.cuda_driver_error() is not None:
        return False
    return not connection.is_open() or connection.current().client.daemon_gpu_path


def cuda_driver_error():
    """None when libcollective can load the NVIDIA driver; otherwise why it cannot."""
    return _core.cuda_driver_error()


def rocm_built():
    """False: collective.torch takes CUDA tensors, not ROCm ones."""
    return False
