"""collective.keras (Horovod's horovod.keras, for the keras package): the same names as
collective.tensorflow.keras, and model.fit with keras' own classes reaching the weights of
plain SGD on the average of every rank's gradient; BestModelCheckpoint keeps the best model."""

import os

import keras
import numpy as np
import pytest

import collective.keras as hvd
import collective.tensorflow.keras as tf_keras_hvd
from test_keras import _BATCH, _EPOCHS, _FEATURES, _LEARNING_RATE, _sgd_by_hand, _shard


def test_it_offers_what_horovod_tensorflow_keras_offers():
    for name in tf_keras_hvd.__all__:
        assert hasattr(hvd, name), name
    # horovod.keras's own signatures (test_keras_parity), over the same implementation.
    assert hvd.load_model is tf_keras_hvd.load_model
    assert hvd.callbacks.__name__ == 'collective.keras.callbacks'
    assert hvd.elastic.KerasState is tf_keras_hvd.elastic.KerasState
    assert hvd.size() >= 1 and hvd.rank() < hvd.size()


def test_fit_with_keras_classes_matches_sgd_on_the_averaged_gradient():
    weights, losses = _sgd_by_hand([_LEARNING_RATE] * _EPOCHS)
    model = keras.Sequential([
        keras.Input(shape=(_FEATURES,)),
        keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros'),
    ])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(_LEARNING_RATE))
    assert isinstance(optimizer, keras.optimizers.SGD)
    model.compile(optimizer=optimizer, loss='mse')
    x, y = _shard(hvd.rank())
    history = model.fit(x, y, batch_size=_BATCH, epochs=_EPOCHS, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    np.testing.assert_allclose(model.get_weights()[0], weights, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(history.history['loss'], losses, rtol=1e-4)


def test_best_model_checkpoint_keeps_the_model_with_the_best_validation_loss(tmp_path):
    # horovod.tensorflow.keras's checkpoint can save weights only (horovod.keras's cannot).
    checkpoint = tf_keras_hvd.callbacks.BestModelCheckpoint(monitor='val_loss',
                                                            save_weights_only=True)
    assert checkpoint.save_best_only and checkpoint.filepath is None
    checkpoint.filepath = os.path.join(tmp_path, f'best-{hvd.rank()}.weights.h5')
    model = keras.Sequential([keras.Input(shape=(_FEATURES,)),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros')])
    # A learning rate large enough to diverge after the first epoch: the best model is the
    # first epoch's, and later epochs must not overwrite it.
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(1.5)), loss='mse')
    x, y = _shard(hvd.rank())
    saved = []

    class Weights(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            saved.append((logs['val_loss'], model.get_weights()[0].copy()))

    model.fit(x, y, batch_size=_BATCH, epochs=4, shuffle=False, verbose=0,
              validation_data=(x, y), callbacks=[checkpoint, Weights()])
    best_loss, best_weights = min(saved, key=lambda entry: entry[0])
    assert best_loss < saved[-1][0], 'the run was meant to diverge'
    model.load_weights(checkpoint.filepath)
    np.testing.assert_allclose(model.get_weights()[0], best_weights, rtol=1e-6)


def test_a_keras_that_is_not_tf_keras_is_refused(monkeypatch):
    import importlib
    import sys

    import tensorflow as tf

    class Keras3:
        __version__ = '3.0.0'

        class optimizers:  # noqa: N801 (keras' module name)
            class Optimizer:
                pass

    monkeypatch.setitem(sys.modules, 'keras', Keras3)
    monkeypatch.delitem(sys.modules, 'collective.keras')
    with pytest.raises(ImportError, match=f'this keras is 3.0.0 and TensorFlow {tf.__version__}'):
        importlib.import_module('collective.keras')
    assert tf.keras is not None
