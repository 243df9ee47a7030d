"""collective.tensorflow's elastic training under ``collectiverun --elastic``: a worker killed
mid-epoch, the others rolling back, re-forming and finishing.

    collectiverun --elastic --min-np 2 -np 3 python3 elastic_check.py custom-loop
        Least squares on 96 fixed samples for 2 epochs with SGD and momentum,
        in global batches of 12 whatever the number of ranks (each rank takes
        every size-th sample, the gradients are summed and divided by 12),
        under hvd.elastic.run with a TensorFlowKerasState. Worker 2 dies in
        step 5 after the weights changed. The survivors must end with every
        sample processed once per epoch in the committed steps and the same
        weights as one process computes.

    collectiverun --elastic --min-np 2 -np 3 python3 elastic_check.py tape-predivide
        The same, the gradients averaged by a DistributedGradientTape with a
        gradient predivide factor in a tf.function traced at 3 ranks: after
        the re-form the average must divide by 2 (the size when it runs).

    collectiverun --elastic --min-np 2 -np 3 python3 elastic_check.py keras-fit
        model.fit with hvd.elastic.KerasState and the three callbacks; worker 2
        dies in the second epoch. The survivors must end the run's epochs with
        the same weights on every rank.

The last line on rank 0 says what was checked ("elastic check: ... ok").
"""

import functools
import os
import sys

import numpy as np
import tensorflow as tf

SAMPLES = 96
BATCH = 12
EPOCHS = 2
STEPS = EPOCHS * SAMPLES // BATCH
VICTIM = 2


def worker():
    return int(os.environ['COLLECTIVE_ELASTIC_WORKER'])


def die():
    """SIGKILL, as a crash. TensorFlow's autograph leaves the modules it generated in the
    temporary directory for an atexit hook to remove, which a killed process never runs:
    removed here first (nothing else of the process's exit runs)."""
    for name, module in list(sys.modules.items()):
        if name.startswith('__autograph_generated_file'):
            try:
                os.remove(module.__file__)
            except OSError:
                pass
    os.kill(os.getpid(), 9)


def data():
    generator = np.random.default_rng(7)
    x = generator.standard_normal((SAMPLES, 4))
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    return tf.constant(x), tf.constant(y)


def make_model():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, dtype='float64')])
    model.build((None, 4))
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
    # Its slots exist from here on, on every rank, as the state needs them.
    optimizer.build(model.trainable_variables)
    return model, optimizer


def flat_weights(model):
    return np.concatenate([v.numpy().reshape(-1) for v in model.trainable_variables])


def reference_weights():
    x, y = data()
    model, optimizer = make_model()
    for step in range(STEPS):
        start = (step * BATCH) % SAMPLES
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((model(x[start:start + BATCH]) - y[start:start + BATCH]) ** 2)
        grads = [g / BATCH for g in tape.gradient(loss, model.trainable_variables)]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return flat_weights(model)


def _predivided_gradients(hvd, model):
    """A step's gradients averaged by a DistributedGradientTape with a gradient predivide
    factor, in a tf.function traced once (at the job's first size) whatever the number of
    samples: after a re-form its division by the size must follow the job. Each rank's loss is
    its samples' sum times the size / BATCH, so that the average is the batch's sum / BATCH."""
    spec = [tf.TensorSpec([None, 4], tf.float64), tf.TensorSpec([None, 1], tf.float64)]

    @tf.function(input_signature=spec)
    def gradients(picked_x, picked_y):
        with tf.GradientTape() as tape:
            scale = tf.cast(hvd.size_op(), tf.float64) / BATCH
            loss = tf.reduce_sum((model(picked_x) - picked_y) ** 2) * scale
        tape = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0)
        return tape.gradient(loss, model.trainable_variables)

    return gradients


def custom_loop(hvd, predivide=False):
    x, y = data()
    model, optimizer = make_model()
    traced = _predivided_gradients(hvd, model) if predivide else None
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, cursor=0, processed=[])
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    nodes = [hvd.cross_size()]  # of the first generation, then after each reset
    state.register_reset_callbacks([lambda: nodes.append(hvd.cross_size())])

    @hvd.elastic.run
    def train(state):
        while state.epoch < EPOCHS:
            step = state.epoch * (SAMPLES // BATCH) + state.cursor // BATCH
            mine = list(range(state.cursor, state.cursor + BATCH))[hvd.rank()::hvd.size()]
            if traced is not None:
                grads = traced(tf.gather(x, mine), tf.gather(y, mine))
            else:
                with tf.GradientTape() as tape:
                    picked = tf.gather(x, mine)
                    loss = tf.reduce_sum((model(picked) - tf.gather(y, mine)) ** 2)
                grads = tape.gradient(loss, model.trainable_variables)
                grads = [hvd.allreduce(g, op=hvd.Sum, name=f'grad.{i}') / BATCH
                         for i, g in enumerate(grads)]
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            if worker() == VICTIM and step == 5:
                die()  # after its weights changed, as the others' did
            done = hvd.allgather(tf.constant(mine, dtype=tf.int64), name='samples')
            state.processed = state.processed + done.numpy().tolist()
            state.cursor += BATCH
            if state.cursor == SAMPLES:
                state.epoch, state.cursor = state.epoch + 1, 0
            state.commit()

    train(state)
    assert resets == [2], resets
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    assert sorted(state.processed) == sorted(list(range(SAMPLES)) * EPOCHS)
    weights = flat_weights(model)
    everyone = hvd.allgather_object(weights.tolist(), name='final.weights')
    assert all(w == everyone[0] for w in everyone), everyone
    np.testing.assert_allclose(weights, reference_weights(), rtol=0, atol=1e-9)
    return (f'{"tape-predivide" if predivide else "custom-loop"}: {hvd.size()} survivors, every '
            f'sample once per epoch, weights as one process, on nodes {nodes}')


def keras_fit(hvd):
    x, y = data()
    model, _ = make_model()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.05))
    model.compile(optimizer=optimizer, loss='mse')
    steps_per_epoch = 4
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    class DieInTheSecondEpoch(tf.keras.callbacks.Callback):
        def on_batch_end(self, batch, logs=None):
            if worker() == VICTIM and state.epoch == 1 and batch == 1:
                die()

    callbacks = [hvd.elastic.CommitStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state), DieInTheSecondEpoch()]

    @hvd.elastic.run
    def train(state):
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank())
        model.fit(dataset.repeat().batch(4), steps_per_epoch=steps_per_epoch,
                  epochs=EPOCHS + 1 - state.epoch, callbacks=callbacks, verbose=0)

    train(state)
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    assert state.epoch == EPOCHS + 1, state.epoch
    weights = flat_weights(model)
    everyone = hvd.allgather_object(weights.tolist(), name='final.weights')
    assert all(w == everyone[0] for w in everyone), everyone
    return f'keras-fit: {hvd.size()} survivors ended epoch {state.epoch} with the same weights'


def main():
    scenario = sys.argv[1]
    if scenario in ('custom-loop', 'tape-predivide'):
        import collective.tensorflow as hvd
        run = functools.partial(custom_loop, predivide=scenario == 'tape-predivide')
    else:
        import collective.tensorflow.keras as hvd
        run = keras_fit
    hvd.init()
    said = run(hvd)
    if hvd.rank() == 0:
        print(f'elastic check: {said} ok', flush=True)


if __name__ == '__main__':
    main()
