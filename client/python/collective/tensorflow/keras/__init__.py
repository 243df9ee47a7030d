"""Horovod's Keras API over collectived: ``import collective.tensorflow.keras as hvd``.

Everything of ``collective.tensorflow``, plus ``DistributedOptimizer``,
``PartialDistributedOptimizer``, ``load_model`` and the callbacks
(``collective.tensorflow.keras.callbacks``) for ``model.fit``; ``allreduce``,
``allgather``, ``broadcast`` and ``reducescatter`` take values, as Horovod's Keras ones
do.
"""

import importlib

import tensorflow as tf

from collective.tensorflow import *  # noqa: F401,F403  (see collective.tensorflow.__all__)
from collective.tensorflow import __all__ as _tensorflow_all
from collective.tensorflow.keras import callbacks
from collective.tensorflow.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
# Keras' collectives take values (Horovod's horovod.tensorflow.keras), not tensors.
from collective.tensorflow.keras.value_collectives import (allgather, allreduce, broadcast,
                                                           load_model, reducescatter)

from collective.tensorflow.graph_api import \
    broadcast_global_variables as _graph_broadcast_global_variables


def broadcast_global_variables(root_rank):
    """Horovod's Keras one: every global variable takes its value on ``root_rank``, run in
    Keras' session (TF1-style graphs; eagerly it raises, as Horovod's)."""
    bcast_op = _graph_broadcast_global_variables(root_rank)
    return tf.compat.v1.keras.backend.get_session().run(bcast_op)


# Keras' own (KerasState and the callbacks), over the star import's
# collective.tensorflow.elastic: `from ... import elastic` would take that one.
elastic = importlib.import_module(__name__ + '.elastic')

__all__ = list(_tensorflow_all) + ['DistributedOptimizer', 'PartialDistributedOptimizer',
                                   'broadcast_global_variables', 'callbacks', 'elastic',
                                   'load_model']
