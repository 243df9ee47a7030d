"""Horovod's Keras callbacks: the same start on every rank, metrics averaged over ranks, and
the learning rate schedules of large-batch training."""

import tensorflow as tf

from collective.common.basics import size
from collective.common.process_sets import global_process_set
from collective.tensorflow.functions import allreduce, broadcast_variables


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from ``root_rank`` once, after the
    first batch (when the optimizer has made its slots), as Horovod does; the model's
    ``local_variables`` (one variable or a collection, or later ``register_local_var``) keep
    each worker's own values."""

    def __init__(self, root_rank, device='', local_variables=None,
                 process_set=global_process_set):
        super().__init__()
        del device
        self.root_rank = root_rank
        self.process_set = process_set
        self.broadcast_done = False
        self._local_vars = set()
        if local_variables is None:
            local_variables = []
        elif isinstance(local_variables, tf.Variable):
            local_variables = [local_variables]
        elif not all(isinstance(var, tf.Variable) for var in local_variables):
            raise ValueError('All local variables must be of tf.Variable type.')
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """Horovod's: ``var`` keeps this worker's value (it is not broadcast)."""
        self._local_vars.add(var.ref())

    def on_batch_end(self, batch, logs=None):
        """After the first batch only: the broadcast of the model's (shared) and the
        optimizer's variables from ``root_rank``."""
        if self.broadcast_done:
            return
        shared = [var for var in self.model.variables if var.ref() not in self._local_vars]
        broadcast_variables(shared, self.root_rank, process_set=self.process_set)
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
        """Each metric of ``logs`` becomes its average over the ranks (in name order, so
        that every rank reduces them alike)."""
        if not logs:
            return
        for metric in sorted(logs):
            value = tf.constant(logs[metric], dtype=tf.float64)
            logs[metric] = float(allreduce(value, name=f'metric.{metric}',
                                           process_set=self.process_set))


class LearningRateScheduleCallback(tf.keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` until
    ``end_epoch``, as Horovod does: once per epoch (``staircase``) or at every batch, with the
    fractional epoch. ``multiplier`` is a number or a function of the epoch. With
    ``momentum_correction``, the optimizer's momentum is scaled by new/old learning rate for the
    batch at which the rate changes (Goyal et al.). Each epoch's logs get its ``lr``.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None

    def on_train_begin(self, logs=None):
        """Takes ``steps_per_epoch`` from ``fit``'s parameters when it was not given and
        the rate changes at every batch (ValueError if ``fit`` does not know it either)."""
        if self.steps_per_epoch is None and not self.staircase:
            self.steps_per_epoch = self.params.get('steps')
            if not self.steps_per_epoch:
                raise ValueError('Could not find the number of steps per epoch: pass '
                                 'steps_per_epoch to the learning rate callback.')

    def on_epoch_begin(self, epoch, logs=None):
        """Notes the epoch, for the batches to come."""
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        """Sets the learning rate for this batch within [start_epoch, end_epoch): at the
        epoch's first batch with ``staircase``, else at every batch."""
        epoch = self.current_epoch
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust(epoch)
        else:
            self._adjust(epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        """Restores the momentum that ``momentum_correction`` scaled for the batch."""
        if self.restore_momentum is not None:
            tf.keras.backend.set_value(self.model.optimizer.momentum, self.restore_momentum)
            self.restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        """Adds the learning rate to the epoch's ``logs`` (``lr``)."""
        if logs is not None:
            logs['lr'] = float(tf.keras.backend.get_value(self.model.optimizer.learning_rate))

    def _adjust(self, epoch):
        optimizer = self.model.optimizer
        old_lr = float(tf.keras.backend.get_value(optimizer.learning_rate))
        new_lr = self.initial_lr * self.multiplier(epoch)
        tf.keras.backend.set_value(optimizer.learning_rate, new_lr)
        if self.momentum_correction and hasattr(optimizer, 'momentum') and old_lr > 0:
            momentum = float(tf.keras.backend.get_value(optimizer.momentum))
            if momentum:
                self.restore_momentum = momentum
                tf.keras.backend.set_value(optimizer.momentum, momentum * new_lr / old_lr)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's warmup: the learning rate climbs from ``initial_lr / size`` to ``initial_lr``
    over ``warmup_epochs``, adjusted at every batch (Goyal et al.)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Counted at the end of each batch, so the last one reaches initial_lr exactly.
            epoch += 1.0 / self.steps_per_epoch
            return (epoch * (size() - 1) / warmup_epochs + 1) / size()

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        """The schedule's; with ``verbose``, says when the warmup has finished."""
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print(f'\nEpoch {epoch + 1}: finished gradual learning rate warmup to '
                  f'{tf.keras.backend.get_value(self.model.optimizer.learning_rate):g}.')


class BestModelCheckpoint(tf.keras.callbacks.ModelCheckpoint):
    """Horovod's ``BestModelCheckpoint``: Keras' ``ModelCheckpoint`` that keeps only the model
    with the best ``monitor`` value (``save_best_only``). As in Horovod, its ``filepath`` is
    None until the caller (Horovod's Spark estimators) sets it, and it saves on every rank that
    has it in its callbacks: give it to rank 0 only, as Horovod's examples do with checkpoints.
    """

    def __init__(self, monitor='val_loss', verbose=0, save_weights_only=False, mode='auto',
                 save_freq='epoch'):
        super().__init__(filepath=None, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
