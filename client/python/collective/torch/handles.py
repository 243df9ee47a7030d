"""Handles of asynchronous operations: starting them under their names, ``poll`` and ``synchronize``.

A handle stands for one call (a grouped call is one handle for several
requests). Until it is synchronized the table keeps the call's tensors alive:
the daemon reads inputs and the binding writes outputs by address.

A call's names are in use from the call until its handle is synchronized:
as in Horovod, a second call under a name in use raises ValueError at the
call. Tying the release to ``synchronize`` rather than to the moment the
daemon completes the first request makes the refusal the same on every
rank, whatever the timing, so that ranks that catch it stay in step.
"""

from collective import _core
from collective.common import connection as connections

# Horovod's text for the same refusal (horovod/common/common.h), raised as
# ValueError there too; common/duplicate_name.h holds it.
DUPLICATE_NAME_ERROR = _core.DUPLICATE_NAME_ERROR


class _Pending:
    __slots__ = ('requests', 'names', 'finish', 'keepalive', 'placement')

    def __init__(self, requests, names, finish, keepalive, placement):
        self.requests = requests  # the binding's handles
        self.names = names
        self.finish = finish  # list of Results -> what synchronize returns
        self.keepalive = keepalive
        self.placement = placement  # a devices.Placement for CUDA tensors, else None


def start(set_id, names, submit, finish, keepalive, placement=None):
    """Starts one call under ``names`` on process set ``set_id`` and returns its handle.

    ``submit()`` hands the requests to the binding and returns its request
    handles; it runs only when no name is in use on that set (else ValueError,
    before anything is sent; as in Horovod, whose sets queue their tensors
    apart, another set may use the same name), and the names stay in use until
    the handle is synchronized. ``finish`` makes synchronize's result from the requests'
    Results; ``keepalive`` is held until then. ``placement``: the CUDA
    device of the call's tensors, current while synchronize waits (the
    wait queues the stream's wait for the result there).
    """
    connection = connections.current()
    names = [(set_id, name) for name in names]
    handle = _claim_names(connection, names)
    try:
        requests = list(submit())
    except BaseException:
        _free_names(connection, handle, names)
        raise
    connection.pending[handle] = _Pending(requests, names, finish, keepalive,
                                          placement if placement is not None and
                                          placement.is_cuda else None)
    return handle


def _returns(output):
    """A handle's finish that returns ``output`` whatever the results."""
    return lambda _results: output


def start_one(set_id, name, tensor, dtype, output, op, prescale, postscale):
    """Starts an allreduce of one contiguous CPU ``tensor`` (of the binding's ``dtype`` code)
    under ``name`` on process set ``set_id`` into the contiguous CPU tensor ``output`` and
    returns its handle, whose ``synchronize`` returns ``output``: ``start`` without the
    general path's closures. The name is claimed, refused and released as ``start`` does;
    both tensors are kept alive until then."""
    connection = connections.current()
    names = ((set_id, name),)
    handle = _claim_names(connection, names)
    try:
        requests = connection.client.allreduce_async(
            [name], [(tensor.data_ptr(), dtype, tensor.shape)], [output.data_ptr()], op,
            prescale, postscale, set_id)
    except BaseException:
        _free_names(connection, handle, names)
        raise
    connection.pending[handle] = _Pending(requests, names, _returns(output), (tensor, output),
                                          None)
    return handle


def run_now(set_id, name, tensor, dtype, output, op, prescale, postscale):
    """Allreduces one contiguous CPU ``tensor`` (of the binding's ``dtype`` code) under
    ``name`` on process set ``set_id`` into the contiguous CPU tensor ``output`` and returns
    once the result is there: a call whose handle nobody ever sees (a synchronous one),
    without a handle's bookkeeping.

    The name is refused and released as ``start`` and ``synchronize`` do for a handle's:
    ValueError at the call while it is in use, in use until the call returns. An error is
    what ``synchronize`` would raise.
    """
    connection = connections.current()
    names = ((set_id, name),)
    handle = _claim_names(connection, names)
    try:
        connection.client.allreduce(name, (tensor.data_ptr(), dtype, tensor.shape),
                                    output.data_ptr(), op, prescale, postscale, set_id)
    finally:
        _free_names(connection, handle, names)


def discard(handle):
    """Waits for a call whose result nobody wants; its error, if any, is dropped too."""
    try:
        synchronize(handle)
    except Exception:  # noqa: BLE001 (the caller gave the call up)
        pass


def _claim_names(connection, names):
    """A new handle id, under which ``names`` ((set id, name) pairs) are now in use;
    Horovod's ValueError if one already is (then none of them is claimed).

    Without a lock: ``dict.setdefault`` inserts a missing key in one atomic step (under
    the GIL, and under a free-threaded build's per-dict lock), so of two threads that
    claim a name at once exactly one gets it. Only a claim's holder removes it."""
    in_use = connection.names_in_use
    handle = next(connection.handle_ids)
    for claimed, name in enumerate(names):
        if in_use.setdefault(name, handle) != handle:
            _free_names(connection, handle, names[:claimed])
            raise ValueError(DUPLICATE_NAME_ERROR)
    return handle


def _free_names(connection, handle, names):
    in_use = connection.names_in_use
    for name in names:
        if in_use.get(name) == handle:
            in_use.pop(name, None)  # None: the connection closed meanwhile


def poll(handle):
    """
    Polls an asynchronous operation's handle to determine whether the
    operation has completed. After ``poll()`` returns True, ``synchronize()``
    will return without blocking.

    Arguments:
        handle: A handle returned by an asynchronous operation.

    Returns:
        A flag indicating whether the operation has completed.
    """
    connection = connections.current()
    pending = connection.pending.get(handle)
    if pending is None:
        raise ValueError(f'Handle {handle} was not created or has been cleared.')
    return all(connection.client.poll(request) for request in pending.requests)


def synchronize(handle):
    """
    Synchronizes an asynchronous operation until it has completed and
    returns its result. The operation's names may then be used again.

    Arguments:
        handle: A handle returned by an asynchronous operation.

    Returns:
        The output tensor of the operation, a list of them for the grouped
        operations, or (output, received_splits) for alltoall. None for a
        handle that is unknown or was synchronized already.

    Raises:
        HorovodInternalError: the operation failed on every rank taking part
            (mismatched tensors, a rank left the job, the daemon failed); the
            message is the daemon's.
    """
    connection = connections.current()
    pending = connection.pending.pop(handle, None)
    if pending is None:
        return None
    wait = connection.client.wait
    if pending.placement is not None:
        wait = pending.placement.guarded(wait)
    results = []
    error = None
    try:
        # Every request of a group is waited for, also after one failed, so
        # that none stays outstanding (its name could not be used again).
        for request in pending.requests:
            try:
                results.append(wait(request))
            except Exception as e:  # noqa: BLE001 (re-raised below, the first one)
                error = error or e
    finally:
        _free_names(connection, handle, pending.names)
    if error is not None:
        for result in results:
            result.release()
        raise error
    return pending.finish(results)
