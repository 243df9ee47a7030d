"""The one connection of this process to collectived, and the bookkeeping that lives with it.

``collective.common.basics`` opens and closes it (``init``/``shutdown``);
everything else asks for the ``current()`` one. What hangs off it (requests
not yet synchronized, the names they hold, counters for unnamed calls) is
dropped with it, so that nothing outlives its client.
"""

import collections
import itertools
import threading

from collective import _core

_NOT_INITIALIZED = 'collective has not been initialized; use hvd.init().'


class Connection:
    """The client ``init()`` made, and the calls started on it but not yet synchronized."""

    def __init__(self, client):
        self.client = client
        # handle -> pending call (see collective.torch.handles).
        self.pending = {}
        self.handle_ids = itertools.count()
        # (process set id, name) -> handle of the call that holds it, from its submission until
        # it is synchronized (see collective.torch.handles). Hooks of a backward pass
        # may submit from other threads: a name is claimed with one setdefault.
        self.names_in_use = {}
        # process set id -> numbers for the names of unnamed calls
        # ('allreduce.noname.<n>'). The members of a set make the same
        # unnamed calls on it, so they count the same; a count per set keeps
        # calls on other sets, made by other ranks, from shifting it.
        self.unnamed_calls = collections.defaultdict(itertools.count)
        # The index of the CUDA device whose tensors this process handed over
        # first: libcollective's client works with that one device only
        # (see collective.torch.devices). None until then.
        self.cuda_device = None

    def peek_unnamed_call(self, set_id):
        """The number the next unnamed call on the set will take, left for that call.

        Not ``next(copy.copy(counter))``: copying an ``itertools.count`` is
        deprecated from Python 3.12 and fails from 3.14.
        """
        number = next(self.unnamed_calls[set_id])
        self.unnamed_calls[set_id] = itertools.count(number)
        return number


_lock = threading.Lock()
_current = None  # the connection of this process, while initialized


def open_connection(static_process_sets, connect=None):
    """Connects to the node's daemon unless connected already; True if this call connected.

    ``static_process_sets``: lists of ranks to create when the job forms
    (ignored when connected already). ``connect(static_process_sets)``
    returns the ``_core.Client``; by default ``_core.Client.connect``.
    """
    global _current
    with _lock:
        if _current is not None:
            return False
        if connect is None:
            _current = Connection(_core.Client.connect(static_process_sets=static_process_sets))
        else:
            _current = Connection(connect(static_process_sets))
        return True


def close_connection():
    """Leaves the job; requests not yet synchronized are abandoned. False if not connected."""
    global _current
    with _lock:
        connection, _current = _current, None
    if connection is None:
        return False
    connection.pending.clear()
    connection.names_in_use.clear()
    connection.client.close()
    return True


def is_open():
    """True between a connecting ``open_connection()`` and ``close_connection()``."""
    return _current is not None


def current():
    """The connection made by ``init()``; ValueError before it."""
    connection = _current
    if connection is None:
        raise ValueError(_NOT_INITIALIZED)
    return connection


def call_name(kind, name, set_id):
    """The daemon's name for one call: Horovod's '<kind>.<name>' or '<kind>.noname.<n>'.

    Unnamed calls on a process set other than the global one (id 0) carry its
    id ('<kind>.noname.<set id>.<n>'): the sets count their unnamed calls
    separately, and the names stay distinct in logs and the timeline.
    """
    if name:
        return f'{kind}.{name}'
    number = next(current().unnamed_calls[set_id])
    if set_id == 0:
        return f'{kind}.noname.{number}'
    return f'{kind}.noname.{set_id}.{number}'
