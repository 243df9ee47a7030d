"""collective: the Python client of collectived, a per-node collective-communication daemon.

``collective.torch`` offers Horovod's PyTorch API (``import collective.torch as hvd``)
on top of the daemon: tensors are handed to it through shared memory, the
daemon negotiates, fuses and reduces them, and the results come back the same
way. ``collective._core`` is the binding of libcollective underneath.
"""

from collective._core import __version__  # noqa: F401  (the build's version, set by CMake)
