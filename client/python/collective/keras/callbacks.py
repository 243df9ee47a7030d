"""Horovod's ``horovod.keras.callbacks``: the callbacks of ``collective.tensorflow.keras`` (Keras
2.15's callbacks are tf.keras's; see ``collective.keras``), with ``horovod.keras``'s own
signatures where they differ from ``horovod.tensorflow.keras``'s (``BestModelCheckpoint``)."""

from collective.tensorflow.keras import callbacks as _callbacks
from collective.tensorflow.keras.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback, LearningRateScheduleCallback, LearningRateWarmupCallback,
    MetricAverageCallback)

__all__ = ['BestModelCheckpoint', 'BroadcastGlobalVariablesCallback',
           'LearningRateScheduleCallback', 'LearningRateWarmupCallback', 'MetricAverageCallback']


class BestModelCheckpoint(_callbacks.BestModelCheckpoint):
    """Horovod's ``horovod.keras.callbacks.BestModelCheckpoint``: the model with the best
    ``monitor`` value, saved whole (``horovod.keras``'s has no ``save_weights_only``: its
    positional parameters are ``monitor, verbose, mode, save_freq``)."""

    def __init__(self, monitor='val_loss', verbose=0, mode='auto', save_freq='epoch'):
        super().__init__(monitor=monitor, verbose=verbose, save_weights_only=False, mode=mode,
                         save_freq=save_freq)
