"""Horovod's Keras callbacks: the same start on every rank, metrics averaged over ranks."""

import tensorflow as tf

from collective.common.process_sets import global_process_set
from collective.tensorflow.functions import allreduce, broadcast_variables


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from ``root_rank`` once, after the
    first batch (when the optimizer has made its slots), as Horovod does."""

    def __init__(self, root_rank, device='', process_set=global_process_set):
        super().__init__()
        del device
        self.root_rank = root_rank
        self.process_set = process_set
        self.broadcast_done = False

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        broadcast_variables(self.model.variables, self.root_rank, process_set=self.process_set)
        optimizer = self.model.optimizer
        variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
        broadcast_variables(variables, self.root_rank, process_set=self.process_set)
        self.broadcast_done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Replaces each metric of an epoch's logs by its average over the ranks, as Horovod does."""

    def __init__(self, device='', process_set=global_process_set):
        super().__init__()
        del device
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for metric in sorted(logs):
            value = tf.constant(logs[metric], dtype=tf.float64)
            logs[metric] = float(allreduce(value, name=f'metric.{metric}',
                                           process_set=self.process_set))
