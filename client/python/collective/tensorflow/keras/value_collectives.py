"""Horovod's Keras collectives on values (``hvd.allreduce(value, name, average, ...)`` of
``horovod.tensorflow.keras``), and ``load_model``, which wraps a saved model's optimizer.

A value is anything ``tf.constant`` takes; ``name`` names that constant, as in Horovod, and
the collective itself is named automatically. Eagerly the result is an eager tensor; in a
TF1 graph, the value Keras' session computes for it.
"""

import inspect

import tensorflow as tf

from collective.common import reduce_ops
from collective.tensorflow import functions, mpi_ops
from collective.tensorflow.compression import Compression
from collective.tensorflow.keras.optimizer import DistributedOptimizer


def _evaluated(result):
    if tf.executing_eagerly():
        return result
    return tf.compat.v1.keras.backend.get_session().run(result)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Horovod's: ``op`` (Average unless said otherwise) of ``value`` over every rank."""
    return _evaluated(functions.allreduce(
        tf.constant(value, name=name), average=average, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, op=op, compression=compression))


def allgather(value, name=None):
    """Horovod's: every rank's ``value`` concatenated along the first dimension."""
    return _evaluated(mpi_ops.allgather(tf.constant(value, name=name)))


def broadcast(value, root_rank, name=None):
    """Horovod's: ``root_rank``'s ``value`` on every rank."""
    return _evaluated(mpi_ops.broadcast(tf.constant(value, name=name), root_rank))


def reducescatter(value, name=None, op=reduce_ops.Average):
    """Horovod's: ``op`` of ``value`` over every rank, this rank's share of the first
    dimension."""
    return _evaluated(functions.reducescatter(tf.constant(value, name=name), op=op))


def _keras_optimizer_classes():
    """The optimizer classes ``tf.keras.optimizers`` offers (Adam, SGD, ...)."""
    return [cls for _, cls in inspect.getmembers(tf.keras.optimizers, inspect.isclass)
            if issubclass(cls, tf.keras.optimizers.Optimizer)
            and cls is not tf.keras.optimizers.Optimizer]


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """Horovod's: ``tf.keras.models.load_model`` whose saved optimizer (one of
    ``tf.keras.optimizers``, or of ``custom_optimizers``) comes back wrapped in
    ``DistributedOptimizer`` with ``compression``, its state included. ``legacy_opts`` takes
    the classes of ``tf.keras.optimizers.legacy`` instead, as Horovod's does."""
    classes = (_legacy_optimizer_classes() if legacy_opts else _keras_optimizer_classes())
    classes += list(custom_optimizers or [])

    def wrapped(cls):
        # Keras deserializes a class from its config: one whose from_config makes the
        # optimizer and wraps it.
        def from_config(_, config, custom_objects=None):
            del custom_objects
            return DistributedOptimizer(cls.from_config(config), compression=compression)
        return type(cls.__name__, (cls,), {'from_config': classmethod(from_config)})

    objects = {}
    for cls in classes:
        # Keras looks a saved optimizer up by its class name, which some versions lowercase.
        objects[cls.__name__] = wrapped(cls)
        objects[cls.__name__.lower()] = wrapped(cls)
    objects.update(custom_objects or {})
    return tf.keras.models.load_model(filepath, custom_objects=objects)


def _legacy_optimizer_classes():
    legacy = tf.keras.optimizers.legacy
    return [cls for _, cls in inspect.getmembers(legacy, inspect.isclass)
            if issubclass(cls, legacy.Optimizer) and cls is not legacy.Optimizer]
