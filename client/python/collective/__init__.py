"""collective: the Python client of collectived, a per-node collective-communication daemon.

``collective.torch`` offers Horovod's PyTorch API (``import collective.torch as hvd``)
on top of the daemon: tensors are handed to it through shared memory, the
daemon negotiates, fuses and reduces them, and the results come back the same
way. ``collective._core`` is the binding of libcollective underneath.
"""


# collective._core is loaded by the framework packages, after the framework:
# PyTorch wheels (and TensorFlow) carry their own protobuf, whose C++ objects
# the dynamic loader shares process-wide with the first protobuf loaded
# (GNU unique symbols, RTLD_LOCAL or not). libcollective's protobuf loaded
# first makes `import torch` abort ("free(): invalid pointer"); loaded after,
# both work. So nothing here loads it at import.


def __getattr__(name):
    if name == '__version__':  # the build's version, set by CMake
        from collective._core import __version__
        return __version__
    raise AttributeError(f"module 'collective' has no attribute {name!r}")
