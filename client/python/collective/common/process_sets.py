"""Process sets: subsets of the job's ranks that run collectives of their own.

A ``ProcessSet`` names its ranks (global ranks, kept sorted); it becomes
usable once registered, either statically with ``init(process_sets=[...])``
or at run time with ``add_process_set``. Registering and removing are
collectives of the whole job: every rank must ask for the same change, in
the same order.
"""

from collective import _core
from collective.common import connection


class ProcessSet:
    """A set of ranks that run collective operations together.

    Initialize it with a list of ranks, then pass it to ``init()`` or
    ``add_process_set()``; pass it as ``process_set=`` to the operations.
    """

    process_set_id = None
    ranks = None
    mpi_comm = None  # Horovod's; collectived builds sets from ranks only

    def __init__(self, ranks_or_comm):
        """``ranks_or_comm``: the global ranks (Horovod's name: an MPI communicator is refused)."""
        if isinstance(ranks_or_comm, (str, bytes)) or not hasattr(ranks_or_comm, '__iter__'):
            raise ValueError('ProcessSet should be initialized with a list of process ranks '
                             '(MPI communicators are not supported)')
        ranks = sorted(ranks_or_comm)
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError('ProcessSet should be initialized with a list of process ranks')
        self.ranks = ranks

    def size(self):
        """The number of ranks in the set, or None while it is not registered."""
        if self.process_set_id is None:
            return None
        return connection.current().client.process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set, or None while it is not registered.

        Useful to find this rank's rows in the result of ``allgather``. The
        operations themselves (``broadcast``'s ``root_rank``) take global
        ranks, as in Horovod. ValueError if this process is not in the set.
        """
        if self.process_set_id is None:
            return None
        return connection.current().client.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is one of the set's ranks, or None when the set has no ranks."""
        if self.ranks is None:
            return None
        return connection.current().client.rank in self.ranks

    def _invalidate(self):
        """Forgets the registration (after ``remove_process_set`` or ``shutdown``); the ranks
        stay, so the object can be added again."""
        self.process_set_id = None

    def __str__(self):
        return (f'ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, '
                f'mpi_comm={self.mpi_comm})')

    __repr__ = __str__


# Every rank of the job; its ranks are known once init() connected.
global_process_set = ProcessSet([])
global_process_set.process_set_id = _core.GLOBAL_PROCESS_SET

# id -> every ProcessSet object registered under it, so that removing a set
# invalidates all of them.
_registered = {0: [global_process_set]}


def add_process_set(process_set):
    """Registers a process set at run time; every rank of the job must call it with the same ranks.

    Arguments:
        process_set: A ``ProcessSet`` or a list of ranks.

    Returns:
        The registered ``ProcessSet`` (the one passed in, when it was one).
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f'{process_set} is registered already')
    process_set_id, ranks = connection.current().client.add_process_set(process_set.ranks)
    process_set.process_set_id = process_set_id
    process_set.ranks = list(ranks)
    _registered.setdefault(process_set_id, []).append(process_set)
    return process_set


def find_process_set(ranks):
    """The registered ``ProcessSet`` of exactly ``ranks`` (global ranks), or None: the one
    this process registered or bound, else a new object for a set another call registered."""
    wanted = tuple(sorted(ranks))
    for set_id, set_ranks in connection.current().client.process_sets():
        if tuple(set_ranks) != wanted:
            continue
        if _registered.get(set_id):
            return _registered[set_id][0]
        process_set = ProcessSet(list(wanted))
        process_set.process_set_id = set_id
        _registered[set_id] = [process_set]
        return process_set
    return None


def remove_process_set(process_set):
    """Removes a process set; every rank of the job must call it.

    Returns:
        True if the set was removed (and every ``ProcessSet`` object for it
        invalidated); False for the global set, which always exists, and for
        a set that is not registered.
    """
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    connection.current().client.remove_process_set(process_set_id)
    for registered in _registered.pop(process_set_id, [process_set]):
        registered._invalidate()
    return True


def process_set_id(process_set):
    """The id to send for ``process_set``; ValueError if it is not registered."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f'process_set must be a ProcessSet, not {type(process_set).__name__}')
    if process_set.process_set_id is None:
        raise ValueError(f'{process_set} is not registered: pass it to init(process_sets=...) '
                         'or add_process_set() first')
    return process_set.process_set_id


def set_rank_of(process_set, global_rank):
    """The rank within ``process_set`` of ``global_rank``; ValueError if it is not a member."""
    if process_set.process_set_id == 0:
        size = connection.current().client.size
        if not 0 <= global_rank < size:
            raise ValueError(f'rank {global_rank} is not a rank of the job (0 to {size - 1})')
        return global_rank
    try:
        return process_set.ranks.index(global_rank)
    except ValueError:
        raise ValueError(f'rank {global_rank} is not a member of {process_set}') from None


def requested_process_sets(process_sets):
    """``init``'s ``process_sets`` argument as a list of ProcessSet objects."""
    if process_sets is None or process_sets == 'dynamic':
        return []
    if isinstance(process_sets, (str, bytes)) or not hasattr(process_sets, '__iter__'):
        raise ValueError('process_sets must be a list of ProcessSet objects (or lists of ranks)')
    requested = [s if isinstance(s, ProcessSet) else ProcessSet(s) for s in process_sets]
    for s in requested:
        if s.process_set_id is not None:
            raise ValueError(f'{s} is registered already')
    return requested


def bind_process_sets(requested):
    """After ``init()``: gives the requested sets the ids the job assigned them."""
    client = connection.current().client
    known = {tuple(ranks): set_id for set_id, ranks in client.process_sets()}
    global_process_set.ranks = list(range(client.size))
    for s in requested:
        set_id = known.get(tuple(s.ranks))
        if set_id is None or set_id == 0:
            raise ValueError(f'process set {s.ranks} does not exist: static process sets are '
                             'created by the first init() only; use add_process_set() afterwards')
        s.process_set_id = set_id
        _registered.setdefault(set_id, []).append(s)


def invalidate_process_sets():
    """After ``shutdown()``: no set is registered any more, the global set has no ranks."""
    for set_id in list(_registered):
        if set_id != 0:
            for s in _registered.pop(set_id):
                s._invalidate()
    global_process_set.ranks = []
