"""collective.tensorflow.keras: model.fit with DistributedOptimizer and the callbacks reaches the
weights of plain SGD on the average of every rank's gradient, computed here by hand."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow.keras as hvd

_FEATURES = 4
_BATCH = 8
_LEARNING_RATE = 0.1
_EPOCHS = 3


def _shard(rank):
    generator = np.random.default_rng(rank)
    x = generator.normal(size=(_BATCH, _FEATURES)).astype(np.float32)
    y = (x @ np.arange(1, _FEATURES + 1, dtype=np.float32) + rank)[:, None]
    return x, y


def _sgd_by_hand(learning_rates):
    """The weights and per-epoch losses (averaged over ranks) of SGD on the averaged gradient,
    one batch (the whole shard) per epoch."""
    shards = [_shard(r) for r in range(hvd.size())]
    weights = np.zeros((_FEATURES, 1))
    losses = []
    for learning_rate in learning_rates:
        losses.append(np.mean([np.mean((x @ weights - y) ** 2) for x, y in shards]))
        gradient = np.mean([2 / _BATCH * x.T @ (x @ weights - y) for x, y in shards], axis=0)
        weights = weights - learning_rate * gradient
    return weights, losses


def _fit(callbacks):
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(_FEATURES,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros'),
    ])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(_LEARNING_RATE))
    assert type(optimizer).__name__ == 'SGD'
    model.compile(optimizer=optimizer, loss='mse')
    x, y = _shard(hvd.rank())
    history = model.fit(x, y, batch_size=_BATCH, epochs=_EPOCHS, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()] + callbacks)
    return model.get_weights()[0], history.history


def test_fit_matches_sgd_on_the_averaged_gradient():
    weights, losses = _sgd_by_hand([_LEARNING_RATE] * _EPOCHS)
    fitted, history = _fit([])
    np.testing.assert_allclose(fitted, weights, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(history['loss'], losses, rtol=1e-4)


def test_learning_rate_warmup_then_schedule():
    size = hvd.size()
    # Warmup over 2 epochs of one batch: the first batch counts as the end of epoch 1.
    learning_rates = [_LEARNING_RATE * ((size - 1) / 2 + 1) / size, _LEARNING_RATE,
                      _LEARNING_RATE * 0.5]
    weights, losses = _sgd_by_hand(learning_rates)
    fitted, history = _fit([
        hvd.callbacks.LearningRateWarmupCallback(_LEARNING_RATE, warmup_epochs=2),
        hvd.callbacks.LearningRateScheduleCallback(_LEARNING_RATE, multiplier=0.5,
                                                   start_epoch=2),
    ])
    np.testing.assert_allclose(history['lr'], learning_rates, rtol=1e-6)
    np.testing.assert_allclose(fitted, weights, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(history['loss'], losses, rtol=1e-4)


def test_the_broadcast_callback_keeps_local_variables_own_values():
    # Frozen layers whose weights start at the rank's number: after fit, the local layer keeps
    # each rank's own, the others hold the root's.
    root = hvd.size() - 1
    constant = tf.keras.initializers.Constant(float(hvd.rank()))
    model = tf.keras.Sequential([tf.keras.Input(shape=(2,))] + [
        tf.keras.layers.Dense(2, kernel_initializer=constant, bias_initializer=constant,
                              trainable=False) for _ in range(2)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1)), loss='mse')
    local = model.layers[0].variables
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(root, local_variables=local)
    model.fit(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), verbose=0,
              callbacks=[callback])
    for layer, expected in ((model.layers[0], hvd.rank()), (model.layers[1], root)):
        for variable in layer.variables:
            np.testing.assert_array_equal(variable.numpy(), np.full(variable.shape, expected))
    one = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local[0])
    assert len(one._local_vars) == 1  # noqa: SLF001
    with pytest.raises(ValueError, match='All local variables must be of tf.Variable type.'):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.ones(2)])
