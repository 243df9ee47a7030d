"""Horovod's ``horovod.tensorflow.keras.elastic`` over collectived: ``KerasState``, the callbacks
that keep it current during ``model.fit``, and ``run``.

    import collective.tensorflow.keras as hvd
    hvd.init()
    ...
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        model.fit(dataset, steps_per_epoch=steps, epochs=epochs - state.epoch, callbacks=callbacks)

    train(state)
"""

import tensorflow as tf

from collective.tensorflow.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                                           ObjectState, State, TensorFlowKerasState, run)

__all__ = ['run', 'State', 'ObjectState', 'KerasState', 'CommitStateCallback',
           'UpdateBatchStateCallback', 'UpdateEpochStateCallback', 'HorovodInternalError',
           'HostsUpdatedInterrupt']


class KerasState(TensorFlowKerasState):
    """Horovod's ``KerasState(model, optimizer=None, **kwargs)``: ``TensorFlowKerasState`` with
    Keras' backend."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(tf.keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of every epoch (the
    count starts again whenever training begins, so that every rank commits at the same
    batches after the job re-formed)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        """Starts the count of batches to the next commit again."""
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        """Commits the state every ``batches_per_commit`` batches."""
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        """Commits the state at the end of every epoch."""
        self.state.commit()


class UpdateBatchStateCallback(tf.keras.callbacks.Callback):
    """Keeps ``state.batch`` at the last batch done, 0 at the end of an epoch; an epoch that
    starts again after a re-formation runs only the batches it had left (``params['steps']``)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        """Forgets the epoch's length: ``fit`` may have been called with another."""
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        """Runs only the batches the epoch has left after a re-formation."""
        if self.params.get('steps'):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get('steps')
            self.params['steps'] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        """Notes the last batch done in the state."""
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        """An epoch done: the state's batch starts again at 0."""
        self.state.batch = 0


class UpdateEpochStateCallback(tf.keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs done across re-formations (Keras counts
    each ``fit`` from 0)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        """Notes the epochs done before this ``fit``."""
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        """Counts the epoch done in the state, across re-formations."""
        self.state.epoch = self.initial_epoch + epoch + 1
