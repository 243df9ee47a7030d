"""Horovod's standalone-Keras API (``horovod.keras``) over collectived:
``import collective.keras as hvd``.

Horovod keeps two Keras front ends, ``horovod.keras`` for the ``keras`` package and
``horovod.tensorflow.keras`` for ``tf.keras``, with the same names. With the TensorFlow this
project pins (2.15), ``keras`` is Keras 2.15, the very package ``tf.keras`` serves: its
optimizers, models and callbacks are the same classes. So this module is
``collective.tensorflow.keras`` under Horovod's other name: ``DistributedOptimizer``,
``PartialDistributedOptimizer``, ``load_model``, the value collectives, ``callbacks`` and
``elastic``, and everything of ``collective.tensorflow``. A ``keras`` that is not
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

# This package's own modules, over the star import's (an attribute of that name would satisfy
# `from collective.keras import callbacks` without importing the submodule).
callbacks = importlib.import_module(__name__ + '.callbacks')
elastic = importlib.import_module(__name__ + '.elastic')
