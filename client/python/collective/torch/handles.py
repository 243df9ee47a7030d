"""Handles of asynchronous operations: ``poll`` and ``synchronize``.

A handle stands for one call (a grouped call is one handle for several
requests). Until it is synchronized the table keeps the call's tensors alive:
the daemon reads inputs and the binding writes outputs by address.
"""

from collective.common import connection as connections


class _Pending:
    __slots__ = ('requests', 'finish', 'keepalive')

    def __init__(self, requests, finish, keepalive):
        self.requests = requests  # the binding's handles
        self.finish = finish  # list of Results -> what synchronize returns
        self.keepalive = keepalive


def register(requests, finish, keepalive):
    """A new handle for the binding's ``requests``; ``finish`` makes synchronize's result."""
    connection = connections.current()
    handle = next(connection.handle_ids)
    connection.pending[handle] = _Pending(list(requests), finish, keepalive)
    return handle


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
    returns its result.

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
    results = []
    error = None
    # Every request of a group is waited for, also after one failed, so that
    # none stays outstanding (its name could not be used again).
    for request in pending.requests:
        try:
            results.append(connection.client.wait(request))
        except Exception as e:  # noqa: BLE001 (re-raised below, the first one)
            error = error or e
    if error is not None:
        for result in results:
            result.release()
        raise error
    return pending.finish(results)
