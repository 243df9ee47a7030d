"""Data-parallel training of a small CNN on generated handwriting-like digits.

No download: the example draws its own 28x28 digit images (a 5x7 bitmap
glyph per class, randomly scaled, placed, thickened, dimmed and noised) from
a fixed seed, so every rank builds the same dataset and trains on its own
shard of it, as with torch's DistributedSampler under Horovod:

    collectiverun -np 4 /usr/bin/python3 examples/python/pytorch_mnist_like.py

Rank 0 prints the training loss and, after every epoch, the test loss and
accuracy averaged over all ranks' shards of the test set.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import collective.torch as ct

# 5x7 glyphs of the digits 0-9, one string of five columns per row.
_GLYPHS = [
    ['01110', '10001', '10011', '10101', '11001', '10001', '01110'],
    ['00100', '01100', '00100', '00100', '00100', '00100', '01110'],
    ['01110', '10001', '00001', '00010', '00100', '01000', '11111'],
    ['11111', '00010', '00100', '00010', '00001', '10001', '01110'],
    ['00010', '00110', '01010', '10010', '11111', '00010', '00010'],
    ['11111', '10000', '11110', '00001', '00001', '10001', '01110'],
    ['00110', '01000', '10000', '11110', '10001', '10001', '01110'],
    ['11111', '00001', '00010', '00100', '01000', '01000', '01000'],
    ['01110', '10001', '10001', '01110', '10001', '10001', '01110'],
    ['01110', '10001', '10001', '01111', '00001', '00010', '01100'],
]


def make_digits(count, seed):
    """Returns `count` noisy 1x28x28 digit images and their labels, the same for a given seed."""
    generator = torch.Generator().manual_seed(seed)
    glyphs = torch.tensor([[[float(c) for c in row] for row in glyph] for glyph in _GLYPHS])
    labels = torch.randint(0, 10, (count,), generator=generator)
    images = torch.zeros(count, 1, 28, 28)
    scales = torch.randint(2, 4, (count,), generator=generator)  # 10x14 or 15x21 pixels
    for i in range(count):
        scale = int(scales[i])
        glyph = glyphs[labels[i]].repeat_interleave(scale, 0).repeat_interleave(scale, 1)
        if torch.rand(1, generator=generator) < 0.5:
            # A thicker stroke: smear the glyph one pixel to the right.
            glyph = torch.maximum(glyph, F.pad(glyph, (1, 0))[:, :-1])
        height, width = glyph.shape
        top = int(torch.randint(0, 28 - height + 1, (1,), generator=generator))
        left = int(torch.randint(0, 28 - width + 1, (1,), generator=generator))
        intensity = 0.5 + 0.5 * torch.rand(1, generator=generator)
        images[i, 0, top:top + height, left:left + width] = glyph * intensity
    images += 0.2 * torch.randn(images.shape, generator=generator)
    return (images - images.mean()) / images.std(), labels


class Net(nn.Module):
    """Two convolutions and two linear layers (about 60 K parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3)
        self.fc1 = nn.Linear(32 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def parse_args():
    parser = argparse.ArgumentParser(description='collective.torch MNIST-like example',
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--batch-size', type=int, default=16, help='input batch size per rank')
    parser.add_argument('--epochs', type=int, default=3, help='number of epochs to train')
    parser.add_argument('--lr', type=float, default=0.0125, help='learning rate of one rank')
    parser.add_argument('--momentum', type=float, default=0.9, help='SGD momentum')
    parser.add_argument('--train-size', type=int, default=6000, help='generated training images')
    parser.add_argument('--test-size', type=int, default=1000, help='generated test images')
    parser.add_argument('--seed', type=int, default=42, help='random seed')
    parser.add_argument('--log-interval', type=int, default=20,
                        help='batches between training status lines')
    parser.add_argument('--fp16-allreduce', action='store_true',
                        help='use fp16 compression during allreduce')
    return parser.parse_args()


def metric_average(value, name):
    """Averages a Python number over every rank."""
    return ct.allreduce(torch.tensor(float(value)), name=name, op=ct.Average).item()


def train(epoch, model, optimizer, loader, sampler, args):
    model.train()
    sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0 and ct.rank() == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(sampler),
                100. * batch_idx / len(loader), loss.item()), flush=True)


def test(model, loader, sampler):
    model.eval()
    test_loss, correct = 0., 0.
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    # Each rank saw its own shard; average the per-shard figures.
    test_loss = metric_average(test_loss / len(sampler), 'avg_loss')
    accuracy = metric_average(correct / len(sampler), 'avg_accuracy')
    if ct.rank() == 0:
        print('\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n'.format(
            test_loss, 100. * accuracy), flush=True)
    return accuracy


def main():
    args = parse_args()
    ct.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ct.local_size()))

    train_set = TensorDataset(*make_digits(args.train_size, args.seed))
    test_set = TensorDataset(*make_digits(args.test_size, args.seed + 1))
    # Each rank reads a different 1/size of the data.
    train_sampler = DistributedSampler(train_set, num_replicas=ct.size(), rank=ct.rank(),
                                       seed=args.seed)
    test_sampler = DistributedSampler(test_set, num_replicas=ct.size(), rank=ct.rank(),
                                      shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=1000, sampler=test_sampler)

    model = Net()
    # The global batch grows with the number of ranks; so does the step.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * ct.size(),
                                momentum=args.momentum)
    compression = ct.Compression.fp16 if args.fp16_allreduce else ct.Compression.none
    optimizer = ct.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                        compression=compression)
    # Start every rank from rank 0's weights and optimizer state.
    ct.broadcast_parameters(model.state_dict(), root_rank=0)
    ct.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(1, args.epochs + 1):
        train(epoch, model, optimizer, train_loader, train_sampler, args)
        accuracy = test(model, test_loader, test_sampler)
    if ct.rank() == 0:
        print('Final test accuracy: {:.2f}% (chance: 10%)'.format(100. * accuracy), flush=True)


if __name__ == '__main__':
    main()
