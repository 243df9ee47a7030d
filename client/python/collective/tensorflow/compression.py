"""Gradient compression around the allreduce: Horovod's ``Compression.none`` and ``.fp16``.

``compress(tensor) -> (compressed, ctx)`` runs before the collective,
``decompress(compressed, ctx)`` after it, so compressors written for
``horovod.tensorflow`` work unchanged.
"""

import tensorflow as tf


class Compressor:
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor and returns it with the context needed to decompress it."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Decompresses the tensor with the given context."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Default no-op compression."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor unmodified."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor unmodified."""
        return tensor


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
