"""Synthetic training throughput of a Keras model under collective.tensorflow.

Every rank trains the same model on random images with DistributedGradientTape
and reports images per second, with the flags and report of Horovod's
tensorflow2_synthetic_benchmark.py:

    PYTHONPATH=build/python build/bin/collectiverun -np 2 build/tf-venv/bin/python \\
        examples/tensorflow/tensorflow2_synthetic_benchmark.py --model MobileNetV2

``--model`` names a tf.keras.applications model (ResNet50, as in Horovod, by
default) or ``SmallCNN``, two convolutions that run quickly on a CPU.
``--image-size`` shrinks the 224x224 images for a quick run.
"""

import argparse
import os
import timeit

import numpy as np
import tensorflow as tf

import collective.tensorflow as hvd


def small_cnn(weights, input_shape, classes):
    """Two convolutions and two dense layers: a model that a CPU trains in milliseconds."""
    del weights
    return tf.keras.Sequential([
        tf.keras.Input(shape=input_shape),
        tf.keras.layers.Conv2D(16, 3, padding='same', activation='relu'),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu'),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(classes),
    ])


def make_model(name, image_size, classes):
    if name == 'SmallCNN':
        return small_cnn(None, (image_size, image_size, 3), classes)
    application = getattr(tf.keras.applications, name, None)
    if application is None:
        raise SystemExit(f'--model {name}: tf.keras.applications has no such model, and it is '
                         'not SmallCNN.')
    return application(weights=None, input_shape=(image_size, image_size, 3), classes=classes)


def parse_args():
    parser = argparse.ArgumentParser(description='collective.tensorflow synthetic benchmark',
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                        help='use fp16 compression during allreduce')
    parser.add_argument('--model', type=str, default='ResNet50',
                        help='model to benchmark: a tf.keras.applications name, or SmallCNN')
    parser.add_argument('--batch-size', type=int, default=32, help='input batch size')
    parser.add_argument('--image-size', type=int, default=224,
                        help='height and width of the images')
    parser.add_argument('--num-classes', type=int, default=1000, help='number of classes')
    parser.add_argument('--num-warmup-batches', type=int, default=10,
                        help='number of warm-up batches that don\'t count towards benchmark')
    parser.add_argument('--num-batches-per-iter', type=int, default=10,
                        help='number of batches per benchmark iteration')
    parser.add_argument('--num-iters', type=int, default=10, help='number of benchmark iterations')
    parser.add_argument('--no-cuda', action='store_true', default=False,
                        help='disables CUDA training')
    parser.add_argument('--threads', type=int, default=0,
                        help='TensorFlow intra-op threads per rank; 0: the cores divided among '
                             'the local ranks')
    return parser.parse_args()


def main():
    args = parse_args()
    hvd.init()

    # collective.tensorflow's ops take CPU tensors, so the model runs on the CPU unless a GPU
    # is wanted and present (each local rank then sees its own).
    gpus = [] if args.no_cuda else tf.config.list_physical_devices('GPU')
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], 'GPU')
    else:
        tf.config.set_visible_devices([], 'GPU')
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    device = 'GPU' if gpus else 'CPU'

    tf.random.set_seed(1234)
    model = make_model(args.model, args.image_size, args.num_classes)
    opt = tf.optimizers.SGD(0.01)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=args.num_classes,
                               dtype=tf.int64)
    loss_fn = tf.losses.SparseCategoricalCrossentropy(from_logits=args.model == 'SmallCNN')

    @tf.function
    def benchmark_step(first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        gradients = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(gradients, model.trainable_variables))
        # The first step has made the optimizer's slots: every rank starts from rank 0's.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)

    def log(text):
        if hvd.rank() == 0:
            print(text, flush=True)

    parameters = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    log('Model: %s (%.2f M parameters)' % (args.model, parameters / 1e6))
    log('Batch size: %d' % args.batch_size)
    log('Number of %ss: %d, %d thread(s) each' % (device, hvd.size(), threads))

    log('Running warmup...')
    benchmark_step(first_batch=True)
    timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)

    log('Running benchmark...')
    img_secs = []
    for iteration in range(args.num_iters):
        seconds = timeit.timeit(lambda: benchmark_step(first_batch=False),
                                number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log('Iter #%d: %.1f img/sec per %s' % (iteration, img_sec, device))
        img_secs.append(img_sec)

    # Every rank's own figure, then the job's: the ranks' means and spreads summed.
    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    print('Rank %d: %.1f +-%.1f img/sec per %s' % (hvd.rank(), img_sec_mean, img_sec_conf,
                                                   device), flush=True)
    total = hvd.allreduce(tf.constant([img_sec_mean, img_sec_conf], dtype=tf.float64),
                          name='benchmark.img_sec', op=hvd.Sum).numpy()
    log('Img/sec per %s: %.1f +-%.1f' % (device, total[0] / hvd.size(), total[1] / hvd.size()))
    log('Total img/sec on %d %s(s): %.1f +-%.1f' % (hvd.size(), device, total[0], total[1]))


if __name__ == '__main__':
    main()
