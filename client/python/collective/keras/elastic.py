"""Horovod's ``horovod.keras.elastic``: ``KerasState``, its callbacks and ``run``, those of
``collective.tensorflow.keras.elastic`` (see ``collective.keras``)."""

from collective.tensorflow.keras.elastic import *  # noqa: F401,F403
from collective.tensorflow.keras.elastic import __all__  # noqa: F401
