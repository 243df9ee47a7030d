"""Keras ``model.fit`` under collective.tensorflow, on generated data (nothing to download).

The task: points in ``--features`` dimensions drawn around ``--classes`` random centres, one
class each; a small dense network learns to tell them apart. Every rank generates the same
data set and trains on its own shard of it, as Horovod's tensorflow2_keras_mnist.py does with
MNIST, with DistributedOptimizer, the learning rate scaled by the number of ranks and warmed
up to it, the variables broadcast from rank 0 and the metrics averaged over the ranks:

    PYTHONPATH=build/python build/bin/collectiverun -np 2 build/tf-venv/bin/python \\
        examples/tensorflow/tensorflow2_keras_synthetic.py

It ends with ``Reached the target: validation accuracy A (target T)`` and status 0 when the
averaged validation accuracy of the last epoch reaches ``--target-accuracy``, and with ``Missed
the target`` and status 1 when not.
"""

import argparse
import sys

import numpy as np
import tensorflow as tf

import collective.tensorflow.keras as hvd


def parse_args():
    parser = argparse.ArgumentParser(description='collective.tensorflow Keras example',
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--epochs', type=int, default=8, help='number of epochs')
    parser.add_argument('--batch-size', type=int, default=32, help='batch size per rank')
    parser.add_argument('--samples', type=int, default=8192,
                        help='training samples in all (each rank trains on its 1/size)')
    parser.add_argument('--features', type=int, default=32, help='dimensions of a sample')
    parser.add_argument('--classes', type=int, default=10, help='number of classes')
    parser.add_argument('--noise', type=float, default=1.5,
                        help='standard deviation of the points around their centre')
    parser.add_argument('--learning-rate', type=float, default=0.001,
                        help='learning rate of one rank (scaled by the number of ranks)')
    parser.add_argument('--warmup-epochs', type=int, default=3,
                        help='epochs over which the learning rate climbs to its scaled value')
    parser.add_argument('--target-accuracy', type=float, default=0.9,
                        help='validation accuracy the last epoch must reach')
    return parser.parse_args()


def make_data(centres, samples, noise, rng):
    """``samples`` points, each around the centre of its (random) class."""
    labels = rng.integers(0, len(centres), size=samples)
    points = centres[labels] + rng.normal(0.0, noise, size=(samples, centres.shape[1]))
    return points.astype(np.float32), labels.astype(np.int64)


def main():
    args = parse_args()
    hvd.init()
    tf.config.set_visible_devices([], 'GPU')
    tf.random.set_seed(1234 + hvd.rank())  # rank 0's initial weights are broadcast anyway

    # The same data set on every rank (the same seed): the training and validation points are
    # drawn around the same centres.
    rng = np.random.default_rng(1)
    centres = rng.normal(0.0, 1.0, size=(args.classes, args.features))
    x_train, y_train = make_data(centres, args.samples, args.noise, rng)
    x_val, y_val = make_data(centres, args.samples // 4, args.noise, rng)
    # Each rank its own shard, for training and for validation alike.
    shard = slice(hvd.rank(), None, hvd.size())
    train = (tf.data.Dataset.from_tensor_slices((x_train[shard], y_train[shard]))
             .shuffle(4096, seed=hvd.rank()).batch(args.batch_size).repeat())
    val = tf.data.Dataset.from_tensor_slices((x_val[shard], y_val[shard])).batch(256)
    steps_per_epoch = len(x_train[shard]) // args.batch_size

    model = tf.keras.Sequential([
        tf.keras.Input(shape=(args.features,)),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(args.classes),
    ])
    scaled_lr = args.learning_rate * hvd.size()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(scaled_lr))
    model.compile(optimizer=optimizer,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])

    callbacks = [
        # Every rank starts from rank 0's weights (and optimizer state).
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Each epoch's metrics, validation ones included, are the ranks' average.
        hvd.callbacks.MetricAverageCallback(),
        # The scaled learning rate is reached gradually, from the one of a single rank.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs,
                                                 steps_per_epoch=steps_per_epoch,
                                                 verbose=1 if hvd.rank() == 0 else 0),
    ]
    history = model.fit(train, steps_per_epoch=steps_per_epoch, epochs=args.epochs,
                        validation_data=val, callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)

    accuracy = history.history['val_accuracy'][-1]
    reached = accuracy >= args.target_accuracy
    if hvd.rank() == 0:
        print('%s the target: validation accuracy %.4f (target %.2f) on %d rank(s)'
              % ('Reached' if reached else 'Missed', accuracy, args.target_accuracy, hvd.size()),
              flush=True)
    return 0 if reached else 1


if __name__ == '__main__':
    sys.exit(main())
