"""Elastic data-parallel training: the job goes on when a worker dies, and grows when one is added.

    collectiverun --elastic --min-np 2 --max-np 4 -np 3 /usr/bin/python3 -u \\
        examples/python/elastic_train.py --kill-worker 2 --kill-at-batch 5

A small classifier on generated points (no download), with Horovod's elastic
pieces: ``hvd.elastic.TorchState`` holds the model, the optimizer, an
``ElasticSampler`` and the epoch; ``hvd.elastic.run`` restarts the training
function from the last commit when a worker dies and from where it is when
one is added; a reset callback scales the learning rate with the job's size.

``--kill-worker W --kill-at-batch B`` makes worker W (COLLECTIVE_ELASTIC_WORKER)
kill itself in batch B of the first epoch (after its backward pass: the others'
gradient allreduces are in flight), and the survivors say
how long the job took to re-form. ``--add-at-batch B`` has rank 0 ask
collectiverun for one more worker (SIGUSR1) at batch B of the first epoch.
After every epoch rank 0 checks that the ranks together processed every
sample of it, and at the end that every rank holds the same weights.
"""

import argparse
import os
import signal
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import collective.torch as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--samples', type=int, default=480)
    parser.add_argument('--batch-size', type=int, default=16, help='per rank')
    parser.add_argument('--lr', type=float, default=0.05, help='per rank (scaled by the size)')
    parser.add_argument('--kill-worker', type=int, default=-1)
    parser.add_argument('--kill-at-batch', type=int, default=5)
    parser.add_argument('--add-at-batch', type=int, default=-1)
    return parser.parse_args()


def dataset(samples):
    generator = torch.Generator().manual_seed(1)
    points = torch.randn(samples, 8, generator=generator)
    labels = (points[:, :4].sum(dim=1) > points[:, 4:].sum(dim=1)).long()
    return TensorDataset(points, labels)


def death_file():
    job = os.environ.get('COLLECTIVE_JOB_ID', 'job').rsplit('.', 1)[0]
    return os.path.join(tempfile.gettempdir(), f'{job}.death')


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(0)
    data = dataset(args.samples)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    worker = int(os.environ.get('COLLECTIVE_ELASTIC_WORKER', hvd.rank()))
    first_generation = os.environ.get('COLLECTIVE_ELASTIC_GENERATION', '0') == '0'
    reformed = {'at': None}
    asked = {'add': False}

    def on_reset():
        for group in optimizer.param_groups:
            group['lr'] = args.lr * hvd.size()
        reformed['at'] = time.time()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            for batch, (points, labels) in enumerate(loader):
                in_first_epoch = first_generation and state.epoch == 0
                if (in_first_epoch and hvd.rank() == 0 and batch == args.add_at_batch and
                        not asked['add']):
                    asked['add'] = True
                    os.kill(os.getppid(), signal.SIGUSR1)  # the parent is collectiverun
                optimizer.zero_grad()
                loss = F.cross_entropy(model(points), labels)
                loss.backward()
                if in_first_epoch and worker == args.kill_worker and batch == args.kill_at_batch:
                    # Mid-step: the others' gradient allreduces are in flight.
                    with open(death_file(), 'w') as f:
                        f.write(repr(time.time()))
                    os.kill(os.getpid(), signal.SIGKILL)
                optimizer.step()
                if reformed['at'] is not None:
                    report_recovery(reformed['at'])
                    reformed['at'] = None
                sampler.record_batch(batch, args.batch_size)
                state.commit()
            seen = set().union(*hvd.allgather_object(sampler.processed_indices, name='seen'))
            accuracy = hvd.allreduce(torch.tensor(evaluate(model, data)), name='accuracy')
            if hvd.rank() == 0:
                missing = len(data) - len(seen)
                print(f'epoch {state.epoch}: {hvd.size()} ranks, {len(seen)} samples '
                      f'({"all" if missing == 0 else f"{missing} MISSING"}), '
                      f'accuracy {accuracy.item():.3f}', flush=True)
                if missing:
                    raise SystemExit(f'epoch {state.epoch} missed {missing} samples')
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather_object(weights.tolist(), name='final.weights')
    if any(w != everyone[0] for w in everyone):
        raise SystemExit('the ranks ended with different weights')
    if hvd.rank() == 0:
        print(f'done: {hvd.size()} ranks hold the same weights', flush=True)


def report_recovery(reset_at):
    if hvd.rank() != 0:
        return
    if not os.path.exists(death_file()):
        print(f're-formed with {hvd.size()} ranks (workers added)', flush=True)
        return
    with open(death_file()) as f:
        died = float(f.read())
    os.unlink(death_file())
    print(f're-formed with {hvd.size()} ranks: {time.time() - died:.3f} s from the death to the '
          f'end of the first step ({reset_at - died:.3f} s to the re-formed job)', flush=True)


def evaluate(model, data):
    with torch.no_grad():
        points, labels = data.tensors
        return (model(points).argmax(dim=1) == labels).float().mean().item()


if __name__ == '__main__':
    main()
