"""collective.tensorflow.keras: model.fit with DistributedOptimizer and the callbacks reaches the
weights of plain SGD on the average of every rank's gradient, computed here by hand."""

import numpy as np
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


def test_fit_matches_sgd_on_the_averaged_gradient():
    shards = [_shard(r) for r in range(hvd.size())]
    weights = np.zeros((_FEATURES, 1))
    losses = []
    for _ in range(_EPOCHS):  # one batch per epoch: the whole shard
        losses.append(np.mean([np.mean((x @ weights - y) ** 2) for x, y in shards]))
        gradient = np.mean([2 / _BATCH * x.T @ (x @ weights - y) for x, y in shards], axis=0)
        weights = weights - _LEARNING_RATE * gradient

    model = tf.keras.Sequential([
        tf.keras.Input(shape=(_FEATURES,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros'),
    ])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(_LEARNING_RATE))
    assert type(optimizer).__name__ == 'SGD'
    model.compile(optimizer=optimizer, loss='mse')
    x, y = shards[hvd.rank()]
    history = model.fit(x, y, batch_size=_BATCH, epochs=_EPOCHS, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    np.testing.assert_allclose(model.get_weights()[0], weights, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(history.history['loss'], losses, rtol=1e-4)
