"""One daemon call on plain tensors, for the autograd functions of collective.mpi4torch.

Every function here takes dense, contiguous CPU tensors without autograd
history (the functions in ``collectives`` and ``point_to_point`` prepare
them) and a process set id, runs one request through collective.torch's
handle table (``collective.torch.handles``: the tensors stay alive until the
request completes, a failure is raised by the wait) and returns the result
as new CPU tensors. Large allreduce and reduce-scatter results are allocated
in the arena (``collective.torch.arena.result_tensor``): the daemon writes
them there, and a collective of such a result reads it in place. Collectives
get automatic names ('mpi4torch.<op>.noname.<n>', counted per process set):
as with MPI, every rank of the set must make the same collective calls in the
same order.
"""

import torch

from collective import _core
from collective.common import connection
from collective.torch import arena, handles, tensor_args
from collective.mpi4torch import session


def _name(kind, set_id):
    return connection.call_name(f'mpi4torch.{kind}', None, set_id)


def _run(set_id, name, submit, finish, keepalive):
    """Submits one named request and waits for it."""
    return handles.synchronize(handles.start(set_id, [name], submit, finish, keepalive))


def _received(results, dtype):
    return tensor_args.tensor_from_result(results[0], dtype)


def _nothing(results):
    for result in results:
        result.release()


def _written(output):
    """The finish of a request that wrote into ``output``: its Results are only released."""
    def finish(results):
        _nothing(results)
        return output
    return finish


def allreduce(tensor, wire_op, set_id):
    """The reduction of every rank's ``tensor`` (the daemon's ``wire_op``), on every rank."""
    client = session.client()
    name = _name('allreduce', set_id)
    output = arena.result_tensor(tensor.shape, tensor.dtype)
    return _run(set_id, name,
                lambda: client.allreduce_async([name], [tensor_args.arg(tensor)],
                                               [output.data_ptr()], wire_op, 1.0, 1.0, set_id),
                _written(output), (tensor, output))


def broadcast_(tensor, root, set_id):
    """Overwrites ``tensor`` with the root's (``root`` counted within the set)."""
    client = session.client()
    name = _name('broadcast', set_id)
    return _run(set_id, name,
                lambda: [client.broadcast_async(name, tensor_args.arg(tensor), tensor.data_ptr(),
                                                root, set_id)],
                _written(tensor), tensor)


def reduce_(tensor, wire_op, root, set_id):
    """Reduces every rank's ``tensor`` into the root's; other ranks' tensors are left as they are."""
    client = session.client()
    name = _name('reduce', set_id)
    is_root = client.process_set_rank(set_id) == root
    return _run(set_id, name,
                lambda: [client.reduce_async(name, tensor_args.arg(tensor),
                                             tensor.data_ptr() if is_root else 0, wire_op, 1.0,
                                             1.0, root, set_id)],
                _written(tensor), tensor)


def allgather(rows, set_id):
    """Every rank's rows (first dimension; counts may differ), in rank order."""
    client = session.client()
    name = _name('allgather', set_id)
    return _run(set_id, name,
                lambda: client.allgather_async([name], [tensor_args.arg(rows)], set_id),
                lambda results: _received(results, rows.dtype), rows)


def exchange(values, set_id):
    """Every rank's list of ints (as long on every rank), in rank order."""
    row = torch.tensor([list(values)], dtype=torch.int64)
    return allgather(row, set_id).tolist()


def reducescatter_sum(rows, my_rows, set_id):
    """The sum of every rank's ``rows``, split by the daemon's rule; this rank's ``my_rows``."""
    client = session.client()
    name = _name('reducescatter', set_id)
    output = arena.result_tensor((my_rows,) + tuple(rows.shape[1:]), rows.dtype)
    return _run(set_id, name,
                lambda: client.reducescatter_async([name], [tensor_args.arg(rows)],
                                                   [output.data_ptr()],
                                                   _core.REDUCE_OPS['sum'], 1.0, 1.0, set_id),
                _written(output), (rows, output))


def alltoall(rows, splits, set_id):
    """Sends ``splits[d]`` rows to rank d; returns (rows received in rank order, their counts)."""
    client = session.client()
    name = _name('alltoall', set_id)

    def finish(results):
        received = list(results[0].received_splits)
        return _received(results, rows.dtype), received

    return _run(set_id, name,
                lambda: [client.alltoall_async(name, tensor_args.arg(rows), list(splits),
                                               set_id)],
                finish, rows)


def gather(rows, root, set_id):
    """Every rank's rows, in rank order, at the root; None on the other ranks."""
    client = session.client()
    name = _name('gather', set_id)
    is_root = client.process_set_rank(set_id) == root

    def finish(results):
        if is_root:
            return _received(results, rows.dtype)
        _nothing(results)
        return None

    return _run(set_id, name,
                lambda: [client.gather_async(name, tensor_args.arg(rows), root, set_id)],
                finish, rows)


def scatter(rows, receive_rows, root, set_id):
    """This rank's ``receive_rows`` rows of the root's ``rows`` (split in rank order).

    ``rows`` is ignored on other ranks but for its dtype and trailing
    dimensions (it has no rows there).
    """
    client = session.client()
    name = _name('scatter', set_id)
    output = torch.empty((receive_rows,) + tuple(rows.shape[1:]), dtype=rows.dtype)
    return _run(set_id, name,
                lambda: [client.scatter_async(name, tensor_args.arg(rows), receive_rows, root,
                                              set_id, output.data_ptr(),
                                              output.numel() * output.element_size())],
                _written(output), (rows, output))


def isend(tensor, dest, tag, set_id):
    """Starts sending ``tensor`` to ``dest``; ``handles.synchronize`` returns None once sent."""
    client = session.client()
    return handles.start(set_id, [],
                         lambda: [client.send_async(tensor_args.arg(tensor), dest, tag, set_id)],
                         _nothing, tensor)


def irecv(output, source, tag, set_id):
    """Starts receiving into ``output`` (a contiguous CPU tensor without history, the size of
    what ``source`` sends); ``handles.synchronize`` returns it."""
    client = session.client()
    return handles.start(set_id, [],
                         lambda: [client.recv_async(tensor_args.arg(output), source, tag, set_id,
                                                    output.data_ptr(),
                                                    output.numel() * output.element_size())],
                         _written(output), output)
