"""Horovod's worker-local variables: DistributedGradientTape.register_local_source,
PartialDistributedGradientTape, scale_local_gradients, and Keras' register_local_var and
PartialDistributedOptimizer. A local variable's gradient is this rank's own (divided by the
set's size unless scale_local_gradients=False); the others are averaged."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd
import collective.tensorflow.keras as hvd_keras


def _loss(shared, local):
    # d/dshared = rank + 1, d/dlocal = 2 * (rank + 1): different on every rank.
    factor = float(hvd.rank() + 1)
    return factor * tf.reduce_sum(shared) + 2.0 * factor * tf.reduce_sum(local)


def _mean_factor():
    return sum(r + 1 for r in range(hvd.size())) / hvd.size()


@pytest.mark.parametrize('scale', [True, False])
def test_register_local_source(scale):
    shared, local = tf.Variable(tf.zeros([3])), tf.Variable(tf.zeros([2]))
    with tf.GradientTape() as tape:
        loss = _loss(shared, local)
    tape = hvd.DistributedGradientTape(tape, scale_local_gradients=scale)
    tape.register_local_source(local)
    shared_grad, local_grad = tape.gradient(loss, [shared, local])
    np.testing.assert_allclose(shared_grad.numpy(), [_mean_factor()] * 3)
    own = 2.0 * (hvd.rank() + 1)
    np.testing.assert_allclose(local_grad.numpy(), [own / hvd.size() if scale else own] * 2)


def test_partial_tape_takes_the_local_layers_weights():
    tf.random.set_seed(7)
    shared_layer = tf.keras.layers.Dense(2, name='shared')
    local_layer = tf.keras.layers.Dense(1, name='local')
    x = tf.constant([[float(hvd.rank() + 1), 1.0]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(local_layer(shared_layer(x)))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local_layer])
    variables = shared_layer.trainable_weights + local_layer.trainable_weights
    grads = tape.gradient(loss, variables)
    # Every rank holds the same shared gradients, the averaged ones: gathered, all rows equal.
    for grad in grads[:2]:
        gathered = hvd.allgather(tf.expand_dims(grad, 0)).numpy()
        np.testing.assert_allclose(gathered, np.repeat(gathered[:1], hvd.size(), axis=0),
                                   rtol=1e-6)
    # The local bias's gradient is 1 on every rank, divided by the size: its own, scaled.
    np.testing.assert_allclose(grads[3].numpy(), [1.0 / hvd.size()])


def test_local_layers_must_be_keras_layers():
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(ValueError, match='All local layers must be of tf.keras.layers.Layer'):
        hvd.PartialDistributedGradientTape(tape, local_layers=[tf.Variable(1.0)])


@pytest.mark.parametrize('partial', [False, True])
def test_keras_optimizer_local_variables(partial):
    shared = tf.Variable(tf.zeros([3]), name='shared')
    local_layer = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros')
    local_layer.build((None, 1))
    local = local_layer.kernel
    if partial:
        opt = hvd_keras.PartialDistributedOptimizer(tf.keras.optimizers.SGD(1.0),
                                                    local_layers=local_layer)
    else:
        opt = hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(1.0))
        opt.register_local_var(local)
    opt.minimize(lambda: _loss(shared, local), [shared, local])
    np.testing.assert_allclose(shared.numpy(), [-_mean_factor()] * 3)
    np.testing.assert_allclose(local.numpy(), [[-2.0 * (hvd.rank() + 1) / hvd.size()]])
