"""Synthetic training throughput of a model under collective.torch.

Every rank trains the same model on random images with DistributedOptimizer
and reports images per second, like Horovod's pytorch_synthetic_benchmark:

    collectiverun -np 4 /usr/bin/python3 examples/python/pytorch_synthetic_benchmark.py

The default model is a small CNN that runs quickly on a CPU; `--model
resnet` is a narrow ResNet of basic residual blocks; `--model mlp` is a wide
multi-layer perceptron whose 59 MB of gradients make the allreduce a large
part of each step. `--no-zero-copy` makes DistributedOptimizer copy each
gradient into shared memory instead of keeping it there.
"""

import argparse
import os
import timeit

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import collective.torch as ct


class SmallCNN(nn.Module):
    """Two convolutions and two linear layers (about 0.6 M parameters)."""

    def __init__(self, num_classes, image_size):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * (image_size // 4) ** 2, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and an identity (or 1x1) shortcut."""

    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                          nn.BatchNorm2d(outputs))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """A CIFAR-style ResNet: three stages of two basic blocks, 16/32/64 channels."""

    def __init__(self, num_classes, image_size):
        del image_size  # global average pooling takes any size
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        blocks, channels = [], 16
        for outputs, stride in [(16, 1), (32, 2), (64, 2)]:
            blocks += [BasicBlock(channels, outputs, stride), BasicBlock(outputs, outputs, 1)]
            channels = outputs
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class WideMLP(nn.Module):
    """Three hidden layers of 2048 units over the flattened image (about 14.7 M parameters)."""

    def __init__(self, num_classes, image_size, width=2048):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * image_size * image_size, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, num_classes))

    def forward(self, x):
        return self.layers(x)


MODELS = {'small_cnn': SmallCNN, 'resnet': SmallResNet, 'mlp': WideMLP}


def parse_args():
    parser = argparse.ArgumentParser(description='collective.torch synthetic benchmark',
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--model', choices=sorted(MODELS), default='small_cnn', help='model')
    parser.add_argument('--batch-size', type=int, default=32, help='input batch size per rank')
    parser.add_argument('--image-size', type=int, default=32, help='height and width of images')
    parser.add_argument('--num-warmup-batches', type=int, default=5,
                        help='number of warm-up batches that don\'t count towards benchmark')
    parser.add_argument('--num-batches-per-iter', type=int, default=10,
                        help='number of batches per benchmark iteration')
    parser.add_argument('--num-iters', type=int, default=5, help='number of benchmark iterations')
    parser.add_argument('--fp16-allreduce', action='store_true',
                        help='use fp16 compression during allreduce')
    parser.add_argument('--no-zero-copy', action='store_true',
                        help='copy gradients into shared memory for each allreduce instead of '
                             'keeping them there')
    parser.add_argument('--threads', type=int, default=0,
                        help='torch threads per rank; 0: the cores divided among local ranks')
    return parser.parse_args()


def main():
    args = parse_args()
    ct.init()
    threads = args.threads or max(1, (os.cpu_count() or 1) // ct.local_size())
    torch.set_num_threads(threads)
    torch.manual_seed(1234)

    model = MODELS[args.model](num_classes=10, image_size=args.image_size)
    # Learning rate scaled by the number of ranks, as with a larger batch.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * ct.size(), momentum=0.9)
    compression = ct.Compression.fp16 if args.fp16_allreduce else ct.Compression.none
    optimizer = ct.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                        compression=compression,
                                        zero_copy_gradients=not args.no_zero_copy)
    ct.broadcast_parameters(model.state_dict(), root_rank=0)
    ct.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 10, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(text):
        if ct.rank() == 0:
            print(text, flush=True)

    parameters = sum(p.numel() for p in model.parameters())
    log('Model: %s (%.2f M parameters)' % (args.model, parameters / 1e6))
    log('Batch size: %d per rank' % args.batch_size)
    log('Number of ranks: %d, %d torch thread(s) each' % (ct.size(), threads))
    log('Gradients: %s' % ('fp16-compressed copies' if args.fp16_allreduce else
                           'copied into shared memory' if args.no_zero_copy else
                           'kept in shared memory (zero-copy)'))

    log('Running warmup...')
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log('Running benchmark...')
    img_secs = []
    for iteration in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log('Iter #%d: %.1f img/sec per rank' % (iteration, img_sec))
        img_secs.append(img_sec)

    # Every rank's own figure, then the job's: the ranks' means summed.
    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    print('Rank %d: %.1f +-%.1f img/sec' % (ct.rank(), img_sec_mean, img_sec_conf), flush=True)
    total = ct.allreduce(torch.tensor([img_sec_mean, img_sec_conf], dtype=torch.float64),
                         name='benchmark.img_sec', op=ct.Sum)
    log('Img/sec per rank: %.1f +-%.1f' % (total[0] / ct.size(), total[1] / ct.size()))
    log('Total img/sec on %d rank(s): %.1f +-%.1f' % (ct.size(), total[0], total[1]))


if __name__ == '__main__':
    main()
