"""Horovod's Keras API over collectived: ``import collective.tensorflow.keras as hvd``.

Everything of ``collective.tensorflow``, plus ``DistributedOptimizer`` and the
callbacks (``collective.tensorflow.keras.callbacks``) for ``model.fit``.
"""

from collective.tensorflow import *  # noqa: F401,F403  (see collective.tensorflow.__all__)
from collective.tensorflow import __all__ as _tensorflow_all
from collective.tensorflow.keras import callbacks
from collective.tensorflow.keras.optimizer import DistributedOptimizer

__all__ = list(_tensorflow_all) + ['DistributedOptimizer', 'callbacks']
