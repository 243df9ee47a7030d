"""Horovod's compressor interface and its no-op compressor, shared by collective.torch and
collective.tensorflow (each adds its framework's fp16 compressor).

``compress(tensor) -> (compressed, ctx)`` runs before the collective and
``decompress(compressed, ctx) -> tensor`` after it, so custom compressors
written for Horovod work unchanged.
"""


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
