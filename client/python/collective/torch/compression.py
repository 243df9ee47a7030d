"""Gradient compression applied around the allreduce of DistributedOptimizer.

A compressor turns a tensor into the tensor that travels through the daemon
and back: ``compress(tensor) -> (compressed, ctx)`` before the collective,
``decompress(compressed, ctx) -> tensor`` after it. The API is Horovod's, so
custom compressors written for ``horovod.torch`` work unchanged.
"""

import torch

from collective.common.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16, halving the bytes moved.

    Tensors of other types (integers, bool) pass through unchanged. The daemon
    accumulates float16 in float32, so the sum of many ranks loses no more
    than the rounding of each rank's input and of the result.
    """

    @staticmethod
    def compress(tensor):
        """Downcasts a floating-point tensor to float16; ctx is its original dtype."""
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Casts the tensor back to the dtype it had before compress()."""
        if ctx.is_floating_point:
            return tensor.type(ctx)
        return tensor


class Compression:
    """Optional gradient compression algorithm used during allreduce."""

    none = NoneCompressor
    """Do not compress the gradients. This is the default."""

    fp16 = FP16Compressor
    """Compress all floating point gradients to 16-bit."""
