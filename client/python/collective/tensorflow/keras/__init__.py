"""Horovod's Keras API over collectived: ``import collective.tensorflow.keras as hvd``.

Everything of ``collective.tensorflow``, plus ``DistributedOptimizer``,
``PartialDistributedOptimizer``, ``load_model`` and the callbacks
(``collective.tensorflow.keras.callbacks``) for ``model.fit``; ``allreduce``,
``allgather``, ``broadcast`` and ``reducescatter`` take values, as Horovod's Keras ones
do.
"""

import importlib

from collective.tensorflow import *  # noqa: F401,F403  (see collective.tensorflow.__all__)
from collective.tensorflow import __all__ as _tensorflow_all
from collective.tensorflow.keras import callbacks
from collective.tensorflow.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
# Keras' collectives take values (Horovod's horovod.tensorflow.keras), not tensors.
from collective.tensorflow.keras.value_collectives import (allgather, allreduce, broadcast,
                                                           load_model, reducescatter)

# Keras' own (KerasState and the callbacks), over the star import's
# collective.tensorflow.elastic: `from ... import elastic` would take that one.
elastic = importlib.import_module(__name__ + '.elastic')

__all__ = list(_tensorflow_all) + ['DistributedOptimizer', 'PartialDistributedOptimizer',
                                   'callbacks', 'elastic', 'load_model']
