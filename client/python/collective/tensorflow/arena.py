"""Tensors that live in this process's shared-memory arena: ``hvd.to_arena`` and
``hvd.in_arena`` (collectived's own, as ``collective.torch``'s; Horovod has none).

A collective's input that lies in the arena reaches the daemon where it is; any other tensor
is first copied there (one copy per call, most of what the Python path costs over the C++
one for large tensors). TensorFlow's tensors are immutable, so ``to_arena`` makes new
tensors there, with the same values (one copy, once), to use in place of the old ones:
tensors a trainer reduces or broadcasts again and again::

    gradients = hvd.to_arena(gradients)          # once
    ...
    reduced = hvd.grouped_allreduce(gradients)   # read in place: nothing copied in

The large outputs of allreduce, broadcast and reducescatter are allocated in the arena
already (the daemon writes them there; see README "How bytes move"), so such a step copies
nothing at all when the arena has room for both (``COLLECTIVE_ARENA_BYTES``). An arena
tensor is an ordinary CPU tensor: every other op takes it, and it keeps its block (and the
connection's mapping) until TensorFlow frees it, also past ``shutdown()``; after a new
``init()`` it is no longer in the new connection's arena and takes the copy path.
"""

import tensorflow as tf

from collective.tensorflow.mpi_ops import _OPS


def to_arena(tensors):
    """``tensors`` (one tensor, or a list or tuple of them) with their values in this process's
    arena: new tensors, to use in place of the given ones (a list for a list or tuple).

    A tensor stays itself when it lies in the arena already, is empty, is of a dtype with no
    flat bytes (strings, resources), or does not fit in half of the arena's free space (the
    rest holds the copies of other inputs and the arena outputs). Eagerly, or inside
    ``tf.function`` (a stateful op: TensorFlow does not fold it into a constant). Needs
    ``init()`` (else FailedPreconditionError when it runs).
    """
    if isinstance(tensors, (list, tuple)):
        return list(_OPS.collective_to_arena(list(tensors))) if tensors else []
    return _OPS.collective_to_arena([tensors])[0]


def in_arena(tensor):
    """Whether ``tensor``'s data lies in this process's arena (a collective then reads it where
    it is): a bool eagerly, a boolean scalar tensor in a graph. Needs ``init()``."""
    there = _OPS.collective_in_arena(tensor)
    return bool(there) if tf.executing_eagerly() else there
