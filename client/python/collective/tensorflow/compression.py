"""Gradient compression around the allreduce: Horovod's ``Compression.none`` and ``.fp16``.

``compress(tensor) -> (compressed, ctx)`` runs before the collective,
``decompress(compressed, ctx)`` after it, so compressors written for
``horovod.tensorflow`` work unchanged.
"""

import tensorflow as tf

from collective.common.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16, halving the bytes moved; others pass unchanged."""

    @staticmethod
    def compress(tensor):
        """Downcasts a floating-point tensor to float16; ctx is its original dtype."""
        if tensor.dtype.is_floating:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Casts back to the original dtype."""
        return tf.cast(tensor, ctx) if ctx.is_floating else tensor


class Compression:
    """The built-in compressors, by Horovod's names."""

    none = NoneCompressor
    fp16 = FP16Compressor
