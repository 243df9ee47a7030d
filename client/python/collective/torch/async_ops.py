"""The asynchronous and in-place collectives, ``join`` and ``barrier``.

Each ``*_async`` call validates its arguments (a ValueError names what is
wrong), hands the tensors to the daemon and returns a handle at once; the
result comes from ``synchronize(handle)``. Operations are keyed by name: every
rank of the process set must submit a tensor under the same name, and when
no name is given one is generated from a counter per process set that every
unnamed call on the set advances, first thing, whether it then succeeds or
not: the members of a set must make the same unnamed calls on it, in the
same order. Named calls (such as those some ranks make while others have
joined) do not count, and a join ends with every rank counting on from the
highest count of any (the joined ranks made fewer calls). A name is in use from the call until its handle is
synchronized; a call under a name in use raises Horovod's ValueError
(``handles.start``).

CUDA tensors go to the daemon where they lie, ordered by the caller's current
stream (``devices``). A CUDA allgather or alltoall first exchanges the
sizes of what every rank sends, so that its output can be allocated on the
device; that exchange makes the call return only once every rank of the set
has made it, so those calls must come in the same order on every rank.
"""

import itertools

import torch

from collective.common import connection
from collective.common.process_sets import global_process_set, process_set_id, set_rank_of
from collective.common import reduce_ops
from collective.common.reduce_ops import Average
from collective.torch import arena, devices, handles, tensor_args


_base_name = connection.call_name


def _names(base, count=None):
    """One name per tensor: the base alone, or numbered members of a group."""
    if count is None:
        return [base]
    return [f'{base}_{i + 1}of{count}' for i in range(count)]


def _client():
    return connection.current().client


def _place(what, tensors):
    return devices.place(what, tensors, connection.current())


def _exchange(base, row, set_id):
    """Every rank's ``row`` of ints (as long on every rank), in set-rank order: the sizes a
    CUDA allgather or alltoall needs to allocate its output. Blocks until every rank of
    the set has sent its own; a failure is the HorovodInternalError every rank receives."""
    client = _client()
    local = torch.tensor([row], dtype=torch.int64)
    requests = client.allgather_async([f'{base}#rows'], [tensor_args.arg(local)], set_id)
    gathered = tensor_args.tensor_from_result(client.wait(requests[0]), torch.int64)
    return gathered.tolist()


def _reduction_async(base, tensors, destinations, op, prescale_factor, postscale_factor,
                     set_id, grouped, submit, placement, then=None, adasum_scope=0):
    """Submits an allreduce or reducescatter of ``tensors`` (checked by the caller) into
    ``destinations``; ``then``, if given, makes synchronize's result from the outputs."""
    code = reduce_ops.wire_code(op)
    inputs = [t.contiguous() for t in tensors]
    names = _names(base, len(inputs) if grouped else None)

    # Keyword arguments cost a pybind11 call time: the scope is passed only when it is not
    # the default.
    extra = {'adasum_scope': adasum_scope} if adasum_scope else {}

    def start():
        return placement.submitter(submit)(
            names, [tensor_args.arg(t) for t in inputs], [d.address for d in destinations],
            code, float(prescale_factor), float(postscale_factor), set_id, **extra)

    def finish(_results):
        outputs = [d.finish() for d in destinations]
        if then is not None:
            outputs = then(outputs)
        return tuple(outputs) if grouped else outputs[0]

    return handles.start(set_id, names, start, finish, (inputs, destinations), placement)


def _allreduce_async(tensors, outputs, name, average, op, prescale_factor, postscale_factor,
                     process_set, grouped):
    """``outputs``: tensors to write into, or None for new ones."""
    set_id = process_set_id(process_set)
    base = _base_name('grouped_allreduce' if grouped else 'allreduce', name, set_id)
    op = reduce_ops.resolve_op(op, average)
    tensors = list(tensors)
    for t in tensors:
        tensor_args.check(t)
    placement = _place('grouped_allreduce' if grouped else 'allreduce', tensors)
    if op == reduce_ops.Adasum:
        scope = reduce_ops.check_adasum_set(process_set, on_gpu=placement.is_cuda)
        if placement.is_cuda:
            return _adasum_through_host(base, tensors, outputs, prescale_factor,
                                        postscale_factor, set_id, grouped, scope)
    if outputs is None:
        outputs = [_new_output(t.shape, t.dtype, placement) for t in tensors]
    destinations = [tensor_args.Destination(o) for o in outputs]
    return _reduction_async(base, tensors, destinations, op, prescale_factor, postscale_factor,
                            set_id, grouped, _client().allreduce_async, placement)


def _new_output(shape, dtype, placement=None):
    """A new tensor for a result the daemon writes: on the placement's GPU, else a CPU
    tensor that a large result gets in the arena (``arena.result_tensor``), where the daemon
    writes it with no copy out and a later collective reads it in place."""
    if placement is not None and placement.is_cuda:
        return torch.empty(shape, dtype=dtype, device=placement.device)
    return arena.result_tensor(shape, dtype)


def _short_allreduce(run, tensor, output, name, op, prescale_factor, postscale_factor,
                     process_set):
    """A one-tensor allreduce that needs none of the general path: a dense, contiguous CPU
    tensor of a type the daemon takes, reduced by any op but Adasum (None: Average; the
    deprecated ``average`` flag is the general path's), into ``output`` (None: a new
    tensor). ``run`` (handles.run_now or handles.start_one) takes it from the name on. The
    tensor's checks, which cannot fail here, come first; then the name and the counter of
    unnamed calls, as on the general path, whose errors it raises.

    Returns (output, what ``run`` returned), or None (nothing done) when the call needs
    the general path.
    """
    # A few hundred nanoseconds per call matter here: with more ranks than cores, each
    # rank's work before it submits delays the last arrival, so the lookups are inline.
    if not (isinstance(tensor, torch.Tensor) and tensor.is_cpu and tensor.layout is torch.strided
            and tensor.is_contiguous()):
        return None
    dtype = tensor_args.DTYPE_CODES.get(tensor.dtype)
    if dtype is None:
        return None
    try:
        code = reduce_ops.SHORT_PATH_CODES[op]
    except (KeyError, TypeError):
        reduce_ops.wire_code(op)  # raises, unless the op is Adasum: the general path's
        return None
    set_id = (global_process_set.process_set_id if process_set is global_process_set else
              process_set_id(process_set))
    base = _base_name('allreduce', name, set_id)
    if output is None:
        output = _new_output(tensor.shape, tensor.dtype)
    return output, run(set_id, base, tensor, dtype, output, code, float(prescale_factor),
                       float(postscale_factor))


def allreduce_now(tensor, name, op, prescale_factor, postscale_factor, process_set):
    """The forward of ``allreduce`` (a new tensor) on the short path (``_short_allreduce``):
    the binding submits the request and waits for it in one call (handles.run_now), with a
    fraction of the general path's Python work, which is most of what a small allreduce
    costs the caller. (``allreduce_`` calls ``_short_allreduce`` itself: one frame less on
    the call a latency loop makes.)

    Returns the output tensor, or None (nothing done) when the call needs the general path.
    """
    done = _short_allreduce(handles.run_now, tensor, None, name, op, prescale_factor,
                            postscale_factor, process_set)
    return None if done is None else done[0]


def _allreduce_start(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """``allreduce_async_`` (``output`` is ``tensor``) or ``allreduce_async`` (``output``
    None: a new tensor) on the short path (``_short_allreduce``): the request goes straight
    to the binding under a handle (handles.start_one) whose synchronize returns the
    output, with about half of the general path's Python work per call, which a trainer's
    gradient hooks pay once per tensor.

    Returns the handle, or None (nothing done) when the call needs the general path.
    """
    started = _short_allreduce(handles.start_one, tensor, output, name, op, prescale_factor,
                               postscale_factor, process_set)
    return None if started is None else started[1]


def _adasum_through_host(base, tensors, outputs, prescale_factor, postscale_factor, set_id,
                         grouped, scope):
    """Adasum of CUDA tensors: each tensor copied to host memory (after the work queued on its
    current stream), combined by the daemon's host Adasum in ``scope`` (the nodes' sums, as
    Horovod's NCCL build combines GPU tensors, or every rank, as its build without NCCL does),
    and the result copied back on synchronize, on the current stream. ``outputs``: CUDA
    tensors to write into, or None for new ones."""
    hosts = [t.detach().to('cpu', memory_format=torch.contiguous_format) for t in tensors]
    if outputs is None:
        outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]

    def copied_back(host_results):
        for output, host in zip(outputs, host_results):
            output.copy_(host)
        return outputs

    return _reduction_async(base, hosts, [tensor_args.Destination(h) for h in hosts],
                            reduce_ops.Adasum, prescale_factor, postscale_factor, set_id,
                            grouped, _client().allreduce_async, _place('allreduce', hosts),
                            then=copied_back, adasum_scope=scope)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts an allreduce of `tensor` (see `allreduce`; without compression). The
    input tensor is not modified.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a new tensor
        holding the result.
    """
    if average is None:
        handle = _allreduce_start(tensor, None, name, op, prescale_factor, postscale_factor,
                                  process_set)
        if handle is not None:
            return handle
    return _allreduce_async([tensor], None, name, average, op, prescale_factor,
                            postscale_factor, process_set, grouped=False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of `tensor` (see `allreduce`; without
    compression): the result is written into `tensor`.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns `tensor`.
    """
    if average is None:
        handle = _allreduce_start(tensor, tensor, name, op, prescale_factor, postscale_factor,
                                  process_set)
        if handle is not None:
            return handle
    return _allreduce_async([tensor], [tensor], name, average, op, prescale_factor,
                            postscale_factor, process_set, grouped=False)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Allreduces `tensor` in place (see `allreduce`; without compression). Not
    differentiable.

    Returns:
        `tensor`, holding the result.
    """
    if average is None and _short_allreduce(handles.run_now, tensor, tensor, name, op,
                                            prescale_factor, postscale_factor,
                                            process_set) is not None:
        return tensor
    return handles.synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts an allreduce of a list of tensors as one group (see
    `grouped_allreduce`; without compression). The input tensors are not modified.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a tuple of new
        tensors holding the results.
    """
    return _allreduce_async(tensors, None, name, average, op, prescale_factor,
                            postscale_factor, process_set, grouped=True)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of a list of tensors as one group (see
    `grouped_allreduce`): the results are written into the tensors.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns the tensors, as a tuple.
    """
    tensors = list(tensors)
    return _allreduce_async(tensors, tensors, name, average, op, prescale_factor,
                            postscale_factor, process_set, grouped=True)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of tensors in place, as one group (see
    `grouped_allreduce`; without compression). Not differentiable.

    Returns:
        The tensors of `tensors`, as a tuple, holding the results.
    """
    return handles.synchronize(grouped_allreduce_async_(tensors, average, name, op,
                                                        prescale_factor, postscale_factor,
                                                        process_set))


def _allgather_async(tensors, name, process_set, grouped):
    set_id = process_set_id(process_set)
    base = _base_name('grouped_allgather' if grouped else 'allgather', name, set_id)
    tensors = list(tensors)
    inputs = [tensor_args.dense(t) for t in tensors]
    placement = _place('grouped_allgather' if grouped else 'allgather', inputs)
    names = _names(base, len(inputs) if grouped else None)
    if placement.is_cuda:
        return _cuda_allgather_async(base, names, inputs, placement, set_id, grouped)
    dtypes = [t.dtype for t in inputs]

    def start():
        return _client().allgather_async(names, [tensor_args.arg(t) for t in inputs], set_id)

    def finish(results):
        outputs = [tensor_args.tensor_from_result(r, dtype) for r, dtype in zip(results, dtypes)]
        return tuple(outputs) if grouped else outputs[0]

    return handles.start(set_id, names, start, finish, inputs)


def _cuda_allgather_async(base, names, inputs, placement, set_id, grouped):
    """Allgather into device outputs sized from every rank's first dimensions."""
    outputs = []

    def start():
        rows_by_rank = _exchange(base, [t.shape[0] if t.dim() else 0 for t in inputs], set_id)
        for t, rows in zip(inputs, devices.gathered_rows(rows_by_rank)):
            shape = (rows,) + tuple(t.shape[1:]) if t.dim() else (0,)
            outputs.append(torch.empty(shape, dtype=t.dtype, device=placement.device))
        return placement.submitter(_client().allgather_async)(
            names, [tensor_args.arg(t) for t in inputs], set_id,
            outputs=[o.data_ptr() for o in outputs],
            output_bytes=[o.numel() * o.element_size() for o in outputs])

    def finish(results):
        for result in results:
            result.release()
        return tuple(outputs) if grouped else outputs[0]

    return handles.start(set_id, names, start, finish, (inputs, outputs), placement)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather of `tensor` (see `allgather`). The input tensor is not
    modified.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a new tensor
        holding every rank's rows, in rank order.
    """
    return _allgather_async([tensor], name, process_set, grouped=False)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of a list of tensors as one group (see
    `grouped_allgather`).

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a tuple of new
        tensors.
    """
    return _allgather_async(tensors, name, process_set, grouped=True)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the sum (or average) of a sparse COO tensor over the ranks of the process set.

    Every rank's nonzero entries are allgathered (the indices transposed so
    that the entries are rows; their number may differ between ranks), and
    entries at the same index are added up.

    Arguments:
        tensor: A sparse COO tensor of the same size on every rank.
        name: A name of the operation; its allgathers are '<name>.indices'
              and '<name>.values'.
        op: Average or Sum.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        As in Horovod, a function (not a handle for `synchronize()`): calling
        it once waits for the allgathers and returns the reduced sparse tensor,
        coalesced. Its ``handles`` are those of the two allgathers.
    """
    if op not in (reduce_ops.Average, reduce_ops.Sum):
        raise NotImplementedError('Sparse tensors support only op=Average or op=Sum.')
    grad = tensor.coalesce()
    indices_handle = allgather_async(grad.indices().t().contiguous(), name=f'{name}.indices',
                                     process_set=process_set)
    try:
        values_handle = allgather_async(grad.values(), name=f'{name}.values',
                                        process_set=process_set)
    except Exception:
        # Refused (every rank refuses the same arguments): the indices'
        # allgather must not keep its name in use.
        handles.discard(indices_handle)
        raise
    return _SparseAllreduce(indices_handle, values_handle, grad.size(), op, process_set)


class _SparseAllreduce:
    """The function ``sparse_allreduce_async`` returns: waits for its allgathers and adds up."""

    def __init__(self, indices_handle, values_handle, size, op, process_set):
        self.handles = (indices_handle, values_handle)
        self._size = size
        self._op = op
        self._process_set = process_set

    def __call__(self):
        indices_handle, values_handle = self.handles
        try:
            indices = handles.synchronize(indices_handle).t()
        finally:
            values = handles.synchronize(values_handle)  # waited for also when indices failed
        if self._op == reduce_ops.Average:
            values = values / self._process_set.size()
        return torch.sparse_coo_tensor(indices, values, self._size).coalesce()


def _broadcast_async(tensor, output, root_rank, name, process_set):
    """``output``: the tensor to write into, or None for a new one."""
    set_id = process_set_id(process_set)
    base = _base_name('broadcast', name, set_id)
    set_root = set_rank_of(process_set, root_rank)
    source = tensor_args.dense(tensor)
    placement = _place('broadcast', [source] if output is None else [source, output])
    if output is None:
        output = _new_output(source.shape, source.dtype, placement)
    destination = tensor_args.Destination(output)

    def start():
        return [placement.submitter(_client().broadcast_async)(
            base, tensor_args.arg(source), destination.address, set_root, set_id)]

    return handles.start(set_id, [base], start, lambda _results: destination.finish(),
                         (source, destination), placement)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root rank's `tensor` (see `broadcast`). The input tensor
    is not modified.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a new tensor
        holding the root's value.
    """
    return _broadcast_async(tensor, None, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast of root rank's `tensor` (see `broadcast`): the
    value is written into `tensor` on every rank.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns `tensor`.
    """
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts root rank's `tensor` into `tensor` on every rank of the process
    set (see `broadcast`). Not differentiable.

    Returns:
        `tensor`, holding the root's value.
    """
    return handles.synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _alltoall_splits(splits):
    """The splits as a list of ints, checked as Horovod checks them: a tensor
    must be one-dimensional and int32 (a list becomes an int32 tensor first),
    else a ValueError in Horovod's words, before anything reaches the daemon.
    """
    if splits is None:
        return []
    if not isinstance(splits, torch.Tensor):
        splits = torch.tensor(splits, dtype=torch.int32, device='cpu')
    if splits.dim() > 1:
        raise ValueError('alltoall expects a 1D splits tensor')
    if splits.dtype != torch.int32:
        raise ValueError('alltoall expects splits to contain 32-bit integer elements.')
    return splits.reshape(-1).tolist()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall of `tensor` (see `alltoall`). The input tensor is not
    modified.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns the tuple
        (output, received_splits) whether or not splits were given.
    """
    set_id = process_set_id(process_set)
    base = _base_name('alltoall', name, set_id)
    split_list = _alltoall_splits(splits)
    source = tensor_args.dense(tensor)
    placement = _place('alltoall', [source])
    if placement.is_cuda:
        return _cuda_alltoall_async(base, source, split_list, placement, set_id)

    def start():
        return [_client().alltoall_async(base, tensor_args.arg(source), split_list, set_id)]

    def finish(results):
        result = results[0]
        received = torch.tensor(result.received_splits, dtype=torch.int32)
        return tensor_args.tensor_from_result(result, source.dtype), received

    return handles.start(set_id, [base], start, finish, source)


def _cuda_alltoall_async(base, source, split_list, placement, set_id):
    """Alltoall into a device output sized from the rows every rank sends this one."""
    received = []
    outputs = []

    def start():
        client = _client()
        submit = placement.submitter(client.alltoall_async)
        set_size = client.process_set_size(set_id)
        if not devices.alltoall_splits_acceptable(split_list, source.shape, set_size):
            # Without an output: libcollective refuses it, saying what is wrong.
            return [submit(base, tensor_args.arg(source), split_list, set_id)]
        sends = split_list or devices.even_splits(source.shape[0], set_size)
        splits_by_rank = _exchange(base, sends, set_id)
        received.extend(devices.received_rows(splits_by_rank,
                                              client.process_set_rank(set_id)))
        shape = (sum(received),) + tuple(source.shape[1:]) if source.dim() else (0,)
        outputs.append(torch.empty(shape, dtype=source.dtype, device=placement.device))
        output = outputs[0]
        return [submit(base, tensor_args.arg(source), split_list, set_id,
                       output=output.data_ptr(),
                       output_bytes=output.numel() * output.element_size())]

    def finish(results):
        results[0].release()
        return outputs[0], torch.tensor(received, dtype=torch.int32)

    return handles.start(set_id, [base], start, finish, (source, outputs), placement)


def _reducescatter_destinations(tensors, set_id, placement):
    """Outputs for this rank's rows: the first (rows mod size) ranks of the set get one more."""
    client = _client()
    set_size = client.process_set_size(set_id)
    set_rank = client.process_set_rank(set_id)
    outputs = []
    for t in tensors:
        if t.dim() == 0:
            # refused by the daemon's client, by name
            outputs.append(torch.empty(0, dtype=t.dtype, device=placement.device))
            continue
        rows = t.shape[0] // set_size + (1 if set_rank < t.shape[0] % set_size else 0)
        outputs.append(_new_output((rows,) + tuple(t.shape[1:]), t.dtype, placement))
    return [tensor_args.Destination(o) for o in outputs]


def _reducescatter_async(tensors, name, op, process_set, prescale_factor, postscale_factor,
                         grouped):
    set_id = process_set_id(process_set)
    base = _base_name('grouped_reducescatter' if grouped else 'reducescatter', name, set_id)
    tensors = list(tensors)
    for t in tensors:
        tensor_args.check(t)
    placement = _place('grouped_reducescatter' if grouped else 'reducescatter', tensors)
    if all(t.dim() for t in tensors):
        # After the checks Horovod makes first, which raise ValueError: a scalar is
        # refused by libcollective, by name.
        reduce_ops.check_reducescatter_op(op)
    destinations = _reducescatter_destinations(tensors, set_id, placement)
    return _reduction_async(base, tensors, destinations, op, prescale_factor, postscale_factor,
                            set_id, grouped, _client().reducescatter_async, placement)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of `tensor` (see `reducescatter`; without
    compression). The input tensor is not modified.

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a new tensor
        holding this rank's rows of the result.
    """
    return _reducescatter_async([tensor], name, op, process_set, prescale_factor,
                                postscale_factor, grouped=False)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of a list of tensors as one group (see
    `grouped_reducescatter`; without compression).

    Returns:
        A handle for `poll()` and `synchronize()`, which returns a tuple of new
        tensors, each holding this rank's rows.
    """
    return _reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                postscale_factor, grouped=True)


def join(device=-1) -> int:
    """A function that indicates that the rank finished processing data.

    All ranks that did not call join() continue to process allreduce operations
    (this rank contributes zeros; averages still divide by the full size).
    This function blocks the calling thread until all ranks join.

    Arguments:
        device: Accepted for compatibility; the daemon provides the zeros.

    Returns:
        Id of the rank that joined last.
    """
    del device  # the zeros come from the daemon, whatever the device
    set_id = process_set_id(global_process_set)
    last = _client().join(set_id)
    _agree_on_automatic_names(set_id)
    return last


# The allreduce by which a join ends: no name a call can generate starts so.
_AUTOMATIC_NAMES = '__collective__.join.automatic_names'


def _agree_on_automatic_names(set_id):
    """Every rank of the set goes on from the same automatic name after a join.

    While ranks had joined, the others made unnamed calls the joined ones did
    not (refused at once, as everything but allreduce is): every rank now
    counts on from the highest count of any rank, so that the next unnamed
    call has one name everywhere again.
    """
    counters = connection.current().unnamed_calls
    count = torch.tensor([connection.current().peek_unnamed_call(set_id)], dtype=torch.int64)
    destination = tensor_args.Destination(count)
    handle = _reduction_async(_AUTOMATIC_NAMES, [count], [destination], reduce_ops.Max, 1.0, 1.0,
                              set_id, False, _client().allreduce_async, devices.CPU)
    counters[set_id] = itertools.count(int(handles.synchronize(handle)[0]))


def barrier(process_set=global_process_set):
    """
    A function that acts as a simple synchronization point for the ranks of the
    process set (the whole job by default). Ranks that reach this function stall
    until all other ranks of the set have reached it.

    Arguments:
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.
    """
    _client().barrier(process_set_id(process_set))
