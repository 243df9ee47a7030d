"""N ranks with batch B train exactly like one process with the whole batch of N*B.

Each step, rank r trains on rows [r*B, (r+1)*B) of a global batch of N*B rows; every rank
also trains a local reference model on all N*B rows with the plain optimizer. The average of
the ranks' mean-loss gradients is the gradient of the global mean loss, so after every step
the weights agree with the reference's (to float64 rounding) and are identical on every rank:
with DistributedGradientTape in a custom loop, and with DistributedOptimizer in model.fit.
"""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow.keras as hvd

_PER_RANK = 4
_STEPS = 4
_CLASSES = 3


def _model():
    """The same initial weights in every process (seeded initializers), in float64."""
    dense = dict(dtype='float64', kernel_initializer=tf.keras.initializers.GlorotUniform(seed=3),
                 bias_initializer=tf.keras.initializers.RandomUniform(-0.1, 0.1, seed=4))
    return tf.keras.Sequential([
        tf.keras.Input(shape=(6, 6, 1), dtype='float64'),
        tf.keras.layers.Conv2D(3, 3, activation='relu', **dense),
        tf.keras.layers.Flatten(dtype='float64'),
        tf.keras.layers.Dense(_CLASSES, **dense),
    ])


def _global_batches():
    """The steps' global batches of N*B images and labels, the same on every rank."""
    generator = np.random.default_rng(5)
    rows = _STEPS * hvd.size() * _PER_RANK
    images = generator.normal(size=(rows, 6, 6, 1))
    labels = generator.integers(0, _CLASSES, size=rows)
    return images, labels


def _rank_rows(rows_per_step):
    """This rank's rows of every step's global batch, in step order."""
    start = hvd.rank() * _PER_RANK
    return np.concatenate([np.arange(step * rows_per_step + start,
                                     step * rows_per_step + start + _PER_RANK)
                           for step in range(_STEPS)])


_OPTIMIZERS = {
    'sgd_momentum': lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
    'adam': lambda: tf.keras.optimizers.Adam(0.01),
}

_LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _assert_parity(weights, reference):
    for got, want in zip(weights, reference):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # Every rank applied the same reduced gradients to the same weights: the same bits.
    everyone = hvd.allgather_object([w.tobytes() for w in weights], name='parity.weights')
    assert all(ranks_weights == everyone[0] for ranks_weights in everyone)


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
def test_distributed_gradient_tape_matches_the_whole_batch(optimizer):
    images, labels = _global_batches()
    rows_per_step = hvd.size() * _PER_RANK
    model, reference = _model(), _model()
    model_optimizer, reference_optimizer = _OPTIMIZERS[optimizer](), _OPTIMIZERS[optimizer]()

    @tf.function
    def distributed_step(x, y):
        with tf.GradientTape() as tape:
            loss = _LOSS(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        model_optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    @tf.function
    def reference_step(x, y):
        with tf.GradientTape() as tape:
            loss = _LOSS(y, reference(x, training=True))
        gradients = tape.gradient(loss, reference.trainable_variables)
        reference_optimizer.apply_gradients(zip(gradients, reference.trainable_variables))

    for step in range(_STEPS):
        whole = slice(step * rows_per_step, (step + 1) * rows_per_step)
        mine = slice(whole.start + hvd.rank() * _PER_RANK,
                     whole.start + (hvd.rank() + 1) * _PER_RANK)
        distributed_step(tf.constant(images[mine]), tf.constant(labels[mine]))
        reference_step(tf.constant(images[whole]), tf.constant(labels[whole]))
        _assert_parity(model.get_weights(), reference.get_weights())


@pytest.mark.parametrize('optimizer', sorted(_OPTIMIZERS))
@pytest.mark.parametrize('groups', [None, 2])
def test_distributed_optimizer_fit_matches_the_whole_batch(optimizer, groups):
    images, labels = _global_batches()
    rows_per_step = hvd.size() * _PER_RANK
    model, reference = _model(), _model()
    model.compile(optimizer=hvd.DistributedOptimizer(_OPTIMIZERS[optimizer](), groups=groups),
                  loss=_LOSS)
    reference.compile(optimizer=_OPTIMIZERS[optimizer](), loss=_LOSS)

    mine = _rank_rows(rows_per_step)
    model.fit(images[mine], labels[mine], batch_size=_PER_RANK, shuffle=False, verbose=0)
    reference.fit(images, labels, batch_size=rows_per_step, shuffle=False, verbose=0)
    assert model.optimizer.iterations.numpy() == _STEPS
    _assert_parity(model.get_weights(), reference.get_weights())
