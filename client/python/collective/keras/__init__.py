"""Horovod's standalone-Keras API (``horovod.keras``) over collectived:
``import collective.keras as hvd``.

Horovod keeps two Keras front ends, ``horovod.keras`` for the ``keras`` package and
``horovod.tensorflow.keras`` for ``tf.keras``, with the same names. With the TensorFlow this
project pins (2.15), ``keras`` is Keras 2.15, the very package ``tf.keras`` serves: its
optimizers, models and callbacks are the same classes. So this module is
``collective.tensorflow.keras`` under Horovod's other name: ``DistributedOptimizer``,
``PartialDistributedOptimizer``, ``load_model``, the value collectives, ``callbacks`` and
``elastic``, and everything of ``collective.tensorflow``, with ``horovod.keras``'s own
signatures where they differ from ``horovod.tensorflow.keras``'s (``DistributedOptimizer``,
``PartialDistributedOptimizer``, ``allreduce``, the callbacks), so that positional calls
written for Horovod mean the same here. A ``keras`` that is not
``tf.keras`` (Keras 3, with TensorFlow 2.16 and later) is refused at import, as Horovod 0.28
does not support it either.
"""

import importlib

import keras
import tensorflow as tf

if keras.optimizers.Optimizer is not tf.keras.optimizers.Optimizer:
    raise ImportError(
        f'collective.keras needs the keras package to be the one tf.keras serves (Keras 2, as '
        f'with TensorFlow 2.15); this keras is {keras.__version__} and TensorFlow '
        f'{tf.__version__}: use collective.tensorflow.keras with tf.keras')

from collective.tensorflow.keras import *  # noqa: E402,F401,F403  (see its __all__)
from collective.tensorflow.keras import __all__  # noqa: E402,F401

from collective.common import reduce_ops  # noqa: E402
from collective.common.process_sets import global_process_set  # noqa: E402
from collective.tensorflow.compression import Compression  # noqa: E402
from collective.tensorflow.keras import optimizer as _optimizer  # noqa: E402
from collective.tensorflow.keras import value_collectives as _values  # noqa: E402


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',  # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=reduce_ops.Average, num_groups=0,
                         groups=None):
    """Horovod's ``horovod.keras.DistributedOptimizer``: ``optimizer`` whose gradients are
    allreduced (``collective.tensorflow.keras.DistributedOptimizer``), with
    ``horovod.keras``'s parameters in its order: no local aggregation, the global process
    set."""
    return _optimizer.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op, num_groups=num_groups,
        groups=groups)


def PartialDistributedOptimizer(optimizer, name=None, device_dense='',  # noqa: N802 (Horovod)
                                device_sparse='', compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=reduce_ops.Average, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """Horovod's ``horovod.keras.PartialDistributedOptimizer``: a ``DistributedOptimizer``
    whose ``local_layers``' trainable weights keep their own gradients, with
    ``horovod.keras``'s parameters in its order."""
    return _optimizer.PartialDistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op, groups=groups,
        process_set=process_set, local_layers=local_layers,
        scale_local_gradients=scale_local_gradients)


def allreduce(value, name=None, average=True, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Horovod's ``horovod.keras.allreduce``: the average of ``value`` over every rank unless
    ``average`` is False (the sum). ``average`` defaults to True here, as in
    ``horovod.keras``: an ``op`` needs ``average=None`` with it (else ValueError, as
    Horovod's)."""
    return _values.allreduce(value, name=name, average=average,
                             prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, op=op, compression=compression)

# This package's own modules, over the star import's (an attribute of that name would satisfy
# `from collective.keras import callbacks` without importing the submodule).
callbacks = importlib.import_module(__name__ + '.callbacks')
elastic = importlib.import_module(__name__ + '.elastic')
