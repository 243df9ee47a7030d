"""``MPI_Communicator``: mpi4torch's communicator, over a collectived process set.

``COMM_WORLD`` is the job's global process set. ``comm_from_mpi4py`` takes
an mpi4py communicator of the job's processes (when MPI's ranks are the
job's: an ``mpirun`` launch) and finds or registers its process set;
``comm_from_process_set(process_set)`` takes a registered
``collective.torch.ProcessSet`` (from ``init(process_sets=...)`` or
``add_process_set``) directly. Ranks (``rank``, roots, sources, destinations) are
counted within the communicator, from 0 to ``size - 1``, as in MPI.
"""

from collective.common import process_sets
from collective.mpi4torch import collectives, point_to_point, requests, session
from collective.mpi4torch.point_to_point import ADJOINT_TAG_OFFSET

# The largest tag: the wire's int32, less the adjoint's offset.
MAX_TAG = 2**31 - 1 - ADJOINT_TAG_OFFSET


def _count(value, what):
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f'{what} must be an int, not {type(value).__name__}.')
    return value


class MPI_Communicator:  # noqa: N801 (mpi4torch's name)
    """A group of ranks that run collectives and exchange messages (mpi4torch's API).

    Methods with a trailing underscore (``Bcast_``, ``Reduce_``) overwrite
    their input, as mpi4torch's do; use the tensor they return.
    """

    def __init__(self, process_set):
        if not isinstance(process_set, process_sets.ProcessSet):
            raise ValueError('MPI_Communicator takes a collective.torch ProcessSet, not '
                             f'{type(process_set).__name__}; see comm_from_process_set.')
        self._process_set = process_set

    @property
    def set_id(self):
        """The id of the process set (connecting first); ValueError if it is not registered."""
        session.client()
        return process_sets.process_set_id(self._process_set)

    @property
    def rank(self):
        """This process's rank in the communicator, from 0 to ``size - 1``."""
        client = session.client()
        set_id = process_sets.process_set_id(self._process_set)
        return client.rank if set_id == 0 else client.process_set_rank(set_id)

    @property
    def size(self):
        """The number of processes in the communicator."""
        client = session.client()
        return client.process_set_size(process_sets.process_set_id(self._process_set))

    def _rank_arg(self, value, what):
        size = self.size
        if not 0 <= _count(value, what) < size:
            raise ValueError(f'{what} {value} is not a rank of this communicator (0 to '
                             f'{size - 1}).')
        return value

    def _tag_arg(self, tag):
        if not 0 <= _count(tag, 'tag') <= MAX_TAG:
            raise ValueError(f'tag {tag} is out of range (0 to {MAX_TAG}: the adjoint message '
                             f'carries the tag plus {ADJOINT_TAG_OFFSET}).')
        return tag

    def Allreduce(self, tensor, op):  # noqa: N802 (mpi4torch's names, here and below)
        """The element-wise reduction (``op``: ``MPI_SUM``, ``MPI_MAX``, ...) of every rank's
        ``tensor`` (the same shape everywhere), on every rank. Differentiable for MPI_SUM."""
        return collectives.Allreduce.apply(tensor, _count(op, 'op'), self)

    def Bcast_(self, tensor, root):  # noqa: N802
        """The root's ``tensor`` on every rank, written into ``tensor`` (in place)."""
        return collectives.bcast_(self, tensor, self._rank_arg(root, 'root'))

    def Reduce_(self, tensor, op, root):  # noqa: N802
        """The reduction of every rank's ``tensor`` at the root, written into its ``tensor``;
        on the other ranks ``tensor`` becomes zeros (in place). Differentiable for MPI_SUM."""
        return collectives.reduce_(self, tensor, _count(op, 'op'), self._rank_arg(root, 'root'))

    def Gather(self, tensor, gatheraxis, root):  # noqa: N802
        """Every rank's ``tensor`` concatenated along ``gatheraxis`` (lengths may differ) at the
        root; an empty tensor (that axis of length 0) elsewhere."""
        return collectives.Gather.apply(tensor, gatheraxis, self._rank_arg(root, 'root'), self)

    def Allgather(self, tensor, gatheraxis):  # noqa: N802
        """Every rank's ``tensor`` concatenated along ``gatheraxis``, on every rank."""
        return collectives.Allgather.apply(tensor, gatheraxis, self)

    def Scatter(self, tensor, scatteraxis, numelem, root):  # noqa: N802
        """This rank's ``numelem`` slices along ``scatteraxis`` of the root's ``tensor`` (split in
        rank order); other ranks' ``tensor`` gives only the dtype."""
        return collectives.Scatter.apply(tensor, scatteraxis, numelem,
                                         self._rank_arg(root, 'root'), self)

    def Alltoall(self, tensor, gatheraxis, scatteraxis, numelem):  # noqa: N802
        """Every rank's slices for this rank (``numelem`` along ``scatteraxis``), concatenated
        along ``gatheraxis`` in rank order."""
        return collectives.Alltoall.apply(tensor, gatheraxis, scatteraxis, numelem, self)

    def Isend(self, tensor, dest, tag):  # noqa: N802
        """Starts sending ``tensor`` to ``dest``; returns a WaitHandle for ``Wait``."""
        return point_to_point.isend(self, tensor, self._rank_arg(dest, 'dest'),
                                    self._tag_arg(tag))

    def Irecv(self, tensor, source, tag):  # noqa: N802
        """Starts receiving a tensor shaped like ``tensor`` from ``source``; returns a
        WaitHandle, whose ``Wait`` returns what was received."""
        return point_to_point.irecv(self, tensor, self._rank_arg(source, 'source'),
                                    self._tag_arg(tag))

    def Wait(self, waithandle):  # noqa: N802
        """Completes a request: the tensor received, or for a send the tensor sent."""
        return point_to_point.wait(self, waithandle)

    def Send(self, tensor, dest, tag):  # noqa: N802
        """``Wait(Isend(tensor, dest, tag))``."""
        return self.Wait(self.Isend(tensor, dest, tag))

    def Recv(self, tensor, source, tag):  # noqa: N802
        """``Wait(Irecv(tensor, source, tag))``: the tensor received."""
        return self.Wait(self.Irecv(tensor, source, tag))


def comm_from_process_set(process_set):
    """The communicator of a process set: what stands here for ``comm_from_mpi4py``.

    ``process_set``: a ``collective.torch.ProcessSet`` registered by
    ``collective.torch.init(process_sets=...)`` or ``add_process_set`` (every
    rank of the job registers it). Ranks within the communicator count the
    set's members in the order of their global ranks; a process outside the
    set gets ValueError from everything but creating the communicator.
    """
    return MPI_Communicator(process_set)


def comm_from_mpi4py(comm):
    """The communicator of the job's ranks that an mpi4py communicator holds (mpi4torch's).

    The processes must run MPI as ranks of the job: started by ``mpirun`` (or
    another MPI launcher) with a collectived on each node, so that mpi4py's
    ``COMM_WORLD`` rank r is the job's rank r. ``comm`` may be ``COMM_WORLD``
    itself (or a duplicate) or a communicator of some of its processes that
    counts them in the order of their ranks, such as those
    ``COMM_WORLD.Split(color)`` returns (``key`` left out, or increasing
    with the rank).

    A collective of the whole job when ``comm`` holds a subset of it: every
    rank of the job calls it at the same point, each with its communicator
    (from the same ``Split``; a rank that got ``MPI.COMM_NULL`` passes that
    and gets ValueError once the others' communicators are made). The job's
    process sets for those ranks are registered (``add_process_set``), or
    reused when they exist.

    Raises RuntimeError when mpi4py is not installed, as mpi4torch does, and
    ValueError for a communicator that does not map onto the job's ranks.
    """
    try:
        from mpi4py import MPI
    except ModuleNotFoundError:
        raise RuntimeError('mpi4py is not available!') from None
    client = session.client()
    world = MPI.COMM_WORLD
    if world.Get_size() != client.size or world.Get_rank() != client.rank:
        raise ValueError(
            f'comm_from_mpi4py: MPI.COMM_WORLD (rank {world.Get_rank()} of '
            f'{world.Get_size()}) is not the job (rank {client.rank} of {client.size}): start '
            'the processes with an MPI launcher (mpirun) so that their MPI ranks are the '
            "job's ranks.")
    members = None
    if comm != MPI.COMM_NULL:
        members = list(comm.Get_group().Translate_ranks(list(range(comm.Get_size())),
                                                        world.Get_group()))
        if members != sorted(members):
            raise ValueError(f'comm_from_mpi4py: the communicator counts its processes in '
                             f'another order than their ranks in the job ({members}); '
                             'collectived process sets count them in rank order.')
    if members == list(range(client.size)):
        return MPI_Communicator(process_sets.global_process_set)
    process_set = _register_subsets(members, client)
    if process_set is None:
        raise ValueError('comm_from_mpi4py: MPI.COMM_NULL holds no process.')
    return MPI_Communicator(process_set)


def _register_subsets(members, client):
    """Every rank's ``members`` (None: none) gathered over the job, each distinct set of ranks
    registered as a process set (the same ones, in the same order, on every rank); the set of
    this rank's ``members``, or None."""
    mask = [0] * client.size
    for rank in members or []:
        mask[rank] = 1
    rows = requests.exchange(mask, process_sets.global_process_set.process_set_id)
    wanted = sorted({tuple(r for r, bit in enumerate(row) if bit) for row in rows} - {()})
    mine = None
    for ranks in wanted:
        process_set = (process_sets.find_process_set(ranks)
                       or process_sets.add_process_set(list(ranks)))
        if members is not None and ranks == tuple(members):
            mine = process_set
    return mine


def deactivate_cuda_aware_mpi_support():
    """Does nothing: CUDA tensors always travel through host memory here."""
