"""collective.tensorflow.keras's collectives on values (Horovod's Keras signatures: the second
positional argument is the name) and load_model, which gives back a saved model whose
optimizer is a DistributedOptimizer with its state."""

import numpy as np
import tensorflow as tf

import collective.tensorflow.keras as hvd


def test_value_collectives():
    size, rank = hvd.size(), hvd.rank()
    np.testing.assert_allclose(hvd.allreduce([float(rank)] * 2, 'keras.mean').numpy(),
                               [(size - 1) / 2] * 2)
    assert hvd.allreduce(rank + 1, 'keras.sum', op=hvd.Sum).numpy() == size * (size + 1) // 2
    gathered = hvd.allgather([[rank, rank]], 'keras.gather').numpy()
    assert gathered.tolist() == [[r, r] for r in range(size)]
    assert hvd.broadcast(rank + 5, size - 1, 'keras.bcast').numpy() == size - 1 + 5
    scattered = hvd.reducescatter(np.ones([size, 2], np.float32) * rank, 'keras.rs', op=hvd.Sum)
    np.testing.assert_allclose(scattered.numpy(), [[size * (size - 1) / 2] * 2])


def test_load_model_wraps_the_optimizer(tmp_path):
    tf.random.set_seed(3)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.01)), loss='mse')
    hvd.broadcast_variables(model.variables, root_rank=0)
    x = np.full((8, 4), 0.5, np.float32)
    y = np.zeros((8, 2), np.float32)
    model.fit(x, y, epochs=1, verbose=0)
    # Every rank saves its own copy (the same model) and loads it back.
    path = str(tmp_path / f'model.{hvd.rank()}.keras')
    model.save(path)
    loaded = hvd.load_model(path)
    assert type(loaded.optimizer).__name__ == 'Adam'
    assert hasattr(loaded.optimizer, 'register_local_var')
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations)
    for saved, back in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(saved, back)
    # Training on rank-dependent data goes on with averaged gradients: the same weights on
    # every rank.
    loaded.fit(x * (hvd.rank() + 1), y, epochs=1, verbose=0)
    kernel = loaded.layers[0].kernel
    gathered = hvd.allgather(tf.expand_dims(kernel, 0)).numpy()
    np.testing.assert_allclose(gathered, np.repeat(gathered[:1], hvd.size(), axis=0), rtol=1e-6)
