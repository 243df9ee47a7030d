"""Torch tensors as the binding takes them: (address, dtype code, shape), and results back as tensors.

The binding never links libtorch; it reads and writes memory at the
addresses given here, so every tensor it sees must be a dense, contiguous
CPU or CUDA tensor that stays alive until its request completes (see
handles.py; where CUDA tensors lie and which stream orders them: devices.py).
"""

import torch

from collective import _core

# The binding's code of each dtype the daemon takes.
DTYPE_CODES = {
    torch.uint8: _core.DTYPES['uint8'],
    torch.int8: _core.DTYPES['int8'],
    torch.int16: _core.DTYPES['int16'],
    torch.int32: _core.DTYPES['int32'],
    torch.int64: _core.DTYPES['int64'],
    torch.float16: _core.DTYPES['float16'],
    torch.bfloat16: _core.DTYPES['bfloat16'],
    torch.float32: _core.DTYPES['float32'],
    torch.float64: _core.DTYPES['float64'],
    torch.bool: _core.DTYPES['bool'],
}


def supported(dtype):
    """Whether the daemon takes tensors of ``dtype``."""
    return dtype in DTYPE_CODES


def check(tensor):
    """Raises ValueError unless the daemon can take ``tensor``."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f'expected a torch.Tensor, got {type(tensor).__name__}')
    if not (tensor.is_cpu or tensor.is_cuda):
        raise ValueError(f'collective.torch handles CPU and CUDA tensors only; this tensor is '
                         f'on {tensor.device}')
    if tensor.layout != torch.strided:
        raise ValueError(f'collective.torch handles dense tensors only, not {tensor.layout}')
    if not supported(tensor.dtype):
        raise ValueError(f'Tensor type {tensor.dtype} is not supported.')


def dense(tensor):
    """``tensor`` checked and made contiguous (a copy only when it is not)."""
    check(tensor)
    return tensor.contiguous()


def arg(tensor):
    """The binding's view of a dense tensor."""
    return tensor.data_ptr(), DTYPE_CODES[tensor.dtype], list(tensor.shape)


class Destination:
    """Where a result is written: the tensor itself, or a contiguous stand-in copied back at the end.

    The in-place forms (``allreduce_``, ``broadcast_``) accept non-contiguous
    tensors; the daemon writes contiguous bytes, so those get a buffer.
    """

    __slots__ = ('tensor', 'buffer')

    def __init__(self, tensor):
        # Every caller passes a tensor it checked, or one it made.
        self.tensor = tensor
        self.buffer = tensor if tensor.is_contiguous() else tensor.contiguous()

    @property
    def address(self):
        """The address the daemon writes the result to."""
        return self.buffer.data_ptr()

    def finish(self):
        """The tensor, holding the result (copied in from the stand-in, if one was used)."""
        if self.buffer is not self.tensor:
            self.tensor.copy_(self.buffer)
        return self.tensor


def tensor_from_result(result, dtype):
    """A new tensor holding the result's bytes; releases the result's view of shared memory."""
    output = torch.empty(result.shape, dtype=dtype)
    try:
        result.copy_to(output.data_ptr(), output.numel() * output.element_size())
    finally:
        result.release()
    return output
