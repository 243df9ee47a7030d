"""collective.tensorflow's SyncBatchNormalization (Horovod's): in training, every worker
normalises with the statistics of all workers' batches, its moving statistics follow them,
and its gradient is that of batch normalisation over the whole batch; checked against
Keras' own BatchNormalization over the concatenation of every rank's batch."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd

_BATCH = 4
_CHANNELS = 3


def _batch(rank):
    """Rank r's batch: values that differ by rank and by channel."""
    generator = np.random.default_rng(100 + rank)
    return (generator.normal(size=(_BATCH, 5, _CHANNELS)) * (rank + 1) + rank).astype(np.float32)


def _layers():
    options = dict(axis=-1, momentum=0.5, epsilon=1e-3)
    return hvd.SyncBatchNormalization(**options), tf.keras.layers.BatchNormalization(**options)


def test_training_uses_every_workers_batch():
    synced, reference = _layers()
    mine = tf.constant(_batch(hvd.rank()))
    everything = tf.constant(np.concatenate([_batch(r) for r in range(hvd.size())]))
    weights = tf.constant(np.linspace(-1.0, 1.0, 5 * _CHANNELS, dtype=np.float32).reshape(5, -1))

    with tf.GradientTape() as tape:
        tape.watch(mine)
        out = synced(mine, training=True)
        loss = tf.reduce_sum(out * weights)
    gradient = tape.gradient(loss, mine)
    with tf.GradientTape() as tape:
        tape.watch(everything)
        expected = reference(everything, training=True)
        expected_loss = tf.reduce_sum(expected * weights)
    expected_gradient = tape.gradient(expected_loss, everything)

    rows = slice(hvd.rank() * _BATCH, (hvd.rank() + 1) * _BATCH)
    np.testing.assert_allclose(out.numpy(), expected.numpy()[rows], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy()[rows],
                               rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(synced.moving_mean.numpy(), reference.moving_mean.numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(synced.moving_variance.numpy(), reference.moving_variance.numpy(),
                               rtol=1e-4, atol=1e-4)


def test_inference_uses_the_moving_statistics_alone():
    synced, _ = _layers()
    mine = tf.constant(_batch(hvd.rank()))
    synced(mine, training=True)
    out = synced(mine, training=False)
    expected = ((mine - synced.moving_mean) / tf.sqrt(synced.moving_variance + 1e-3)
                * synced.gamma + synced.beta)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_inside_a_tf_function_and_as_horovod_names_it():
    synced, _ = _layers()
    assert synced.name.startswith('sync_batch_normalization')

    @tf.function
    def step(x):
        return synced(x, training=True)

    step(tf.constant(_batch(hvd.rank())))
    everything = np.concatenate([_batch(r) for r in range(hvd.size())])
    np.testing.assert_allclose(synced.moving_mean.numpy(),
                               0.5 * everything.mean(axis=(0, 1)), rtol=1e-4, atol=1e-5)


def test_fused_is_refused_as_horovod_refuses_it():
    for fused in (True, None):
        with pytest.raises(ValueError, match='SyncBatchNormalization does not support fused=True'):
            hvd.SyncBatchNormalization(fused=fused)
