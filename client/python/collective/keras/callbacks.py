"""Horovod's ``horovod.keras.callbacks``: the callbacks of ``collective.tensorflow.keras`` (Keras
2.15's callbacks are tf.keras's; see ``collective.keras``)."""

from collective.tensorflow.keras.callbacks import (  # noqa: F401
    BestModelCheckpoint, BroadcastGlobalVariablesCallback, LearningRateScheduleCallback,
    LearningRateWarmupCallback, MetricAverageCallback)

__all__ = ['BestModelCheckpoint', 'BroadcastGlobalVariablesCallback',
           'LearningRateScheduleCallback', 'LearningRateWarmupCallback', 'MetricAverageCallback']
