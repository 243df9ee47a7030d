"""Where a call's tensors lie, and what that asks of the call.

Every tensor of one call (a grouped call's too) must lie on one device: the
CPU, or one CUDA device, the same one for every call of this process
(libcollective's client works with the device it saw first). For CUDA
tensors the binding also needs the caller's current stream on that device:
libcollective records an event there that the daemon waits for before it
reads the inputs, and waiting for the result makes that stream wait for the
daemon's event, so work queued on the stream afterwards sees the result and
the host never waits for the GPU. Nothing is copied to or from the host.

Results whose size the call cannot know (allgather, alltoall) are written by
the daemon into device memory that must be named when the request is made;
``gathered_rows`` and ``received_rows`` say how much from what every rank
sends, which the caller first exchanges with the other ranks.

The logic here takes tensor-like objects (``.is_cuda`` and ``.device.index``)
and gets streams and device guards from the functions it is given (torch's
by default), so that it is tested without a GPU (tests/python/test_devices.py).
"""

from collective import _core

# Horovod raises RuntimeError for a CPU/GPU mix in one call (its
# test_torch.py expects torch.FatalError or RuntimeError), and so do we.
MIXED_DEVICES_ERROR = ('{what} mixes tensors on {first} and {second}: every tensor of one '
                       'collective must lie on the same device')
OTHER_CUDA_DEVICE_ERROR = ('{what}: this tensor lies on cuda:{index}, but this process handed '
                           'tensors of cuda:{used} to collectived already; a process works with '
                           'one GPU (call torch.cuda.set_device(local_rank) before building the '
                           'model)')


def _current_stream(index):
    import torch  # only ever called with a CUDA tensor at hand
    return torch.cuda.current_stream(index).cuda_stream


def _device_guard(index):
    import torch
    return torch.cuda.device(index)


class Placement:
    """One call's device: the CPU, or a CUDA device with the caller's current stream on it."""

    __slots__ = ('index', 'cuda_stream', '_guard')

    def __init__(self, index=None, cuda_stream=0, guard=_device_guard):
        self.index = index  # None: the CPU
        self.cuda_stream = cuda_stream
        self._guard = guard

    @property
    def is_cuda(self):
        """Whether the call runs on a CUDA device (else the CPU)."""
        return self.index is not None

    @property
    def device(self):
        """What torch.empty(device=...) takes: None (the default, the CPU) or 'cuda:<index>'."""
        return None if self.index is None else f'cuda:{self.index}'

    def submitter(self, submit):
        """``submit`` (a collective of the binding) as this placement calls it: unchanged
        for the CPU, so that CPU calls cost what they did; for CUDA, with the device code
        and stream added, and run with the device current (libcollective asks the driver
        for the current context)."""
        if self.index is None:
            return submit

        def submit_on_device(*args, **kwargs):
            with self._guard(self.index):
                return submit(*args, **kwargs, device=_core.DEVICES['cuda'],
                              cuda_stream=self.cuda_stream)

        return submit_on_device

    def guarded(self, function):
        """``function`` run with this device current (unchanged for the CPU): waiting for a
        CUDA result queues the stream's wait, and the default stream is the current
        device's."""
        if self.index is None:
            return function

        def on_device(*args):
            with self._guard(self.index):
                return function(*args)

        return on_device


CPU = Placement()


def _describe(tensor):
    return 'cpu' if not tensor.is_cuda else f'cuda:{tensor.device.index}'


def place(what, tensors, connection=None, current_stream=_current_stream,
          guard=_device_guard):
    """The Placement of one call's ``tensors`` (already checked to be CPU or CUDA tensors).

    Raises RuntimeError when they lie on different devices (a CPU/GPU mix, or
    two GPUs), and ValueError for a GPU other than the one this process
    (``connection.cuda_device``) uses; the first CUDA call claims its device.
    ``what`` names the call in the messages.
    """
    first = None
    for tensor in tensors:
        if first is None:
            first = tensor
        elif tensor.is_cuda != first.is_cuda or (
                tensor.is_cuda and tensor.device.index != first.device.index):
            raise RuntimeError(MIXED_DEVICES_ERROR.format(what=what, first=_describe(first),
                                                          second=_describe(tensor)))
    if first is None or not first.is_cuda:
        return CPU
    index = first.device.index
    if connection is not None:
        if connection.cuda_device is None:
            connection.cuda_device = index
        elif connection.cuda_device != index:
            raise ValueError(OTHER_CUDA_DEVICE_ERROR.format(what=what, index=index,
                                                            used=connection.cuda_device))
    return Placement(index, current_stream(index), guard)


def gathered_rows(rows_by_rank):
    """Allgather: the first dimension of each tensor's result, given ``rows_by_rank[r][i]``,
    the first dimension of tensor i on rank r of the set."""
    if not rows_by_rank:
        return []
    return [sum(rows[i] for rows in rows_by_rank) for i in range(len(rows_by_rank[0]))]


def received_rows(splits_by_rank, set_rank):
    """Alltoall: the rows this rank (``set_rank`` within the set) receives from each rank,
    given ``splits_by_rank[r][j]``, the rows rank r sends to rank j."""
    return [splits[set_rank] for splits in splits_by_rank]


def alltoall_splits_acceptable(splits, shape, set_size):
    """Whether libcollective takes an alltoall of a tensor of ``shape`` with ``splits``
    (empty: the first dimension shared evenly). Unacceptable ones go to libcollective
    without an output, which it refuses at the call with what is wrong, before the sizes
    are exchanged."""
    if not shape:
        return False
    if not splits:
        return shape[0] % set_size == 0
    return len(splits) == set_size and min(splits) >= 0 and sum(splits) == shape[0]


def even_splits(rows, set_size):
    """Alltoall without splits: the rows that go to each rank."""
    return [rows // set_size] * set_size
