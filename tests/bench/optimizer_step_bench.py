"""Training step time of DistributedOptimizer with its gradients in shared memory or copied there.

    collectiverun -np 4 /usr/bin/python3 tests/bench/optimizer_step_bench.py [--megabytes 100]

Two identical models whose backward costs almost nothing (each parameter's
gradient is a constant) take turns, step by step, in one job: one with
``zero_copy_gradients=True`` (the default: autograd accumulates into the
client's arena and the daemon reads the gradients there), one with
``zero_copy_gradients=False`` (libcollective copies each gradient into the
arena when its hook submits it). Taking turns shares whatever else the
machine does between the two. Every rank reports the median of each phase
(zero_grad + forward + backward, which includes the hooks' submissions;
synchronize; the SGD step; the whole step; and the process's CPU time per
step); rank 0 prints their averages over the ranks. It fails if the two
models' weights differ at the end.
"""

import argparse
import statistics
import time

import torch

import collective.torch as ct

_PHASES = ('backward', 'synchronize', 'step', 'total', 'cpu')


class Gradients(torch.nn.Module):
    """`count` parameters of `numel` float32 each, with a trivial forward and backward."""

    def __init__(self, count, numel):
        super().__init__()
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(numel)) for _ in range(count)])

    def forward(self):
        return sum((w * 1e-3).sum() for w in self.weights)


def _timed_step(model, optimizer):
    """One training step; the seconds of each phase."""
    ct.barrier()
    cpu = time.process_time()
    start = time.perf_counter()
    optimizer.zero_grad()
    model().backward()
    backward = time.perf_counter()
    optimizer.synchronize()
    synchronized = time.perf_counter()
    with optimizer.skip_synchronize():
        optimizer.step()
    end = time.perf_counter()
    return (backward - start, synchronized - backward, end - synchronized, end - start,
            time.process_time() - cpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--megabytes', type=int, default=100, help='gradient bytes per step')
    parser.add_argument('--tensors', type=int, default=50, help='number of parameters')
    parser.add_argument('--steps', type=int, default=20, help='measured steps per variant')
    parser.add_argument('--warmup', type=int, default=3, help='unmeasured steps per variant')
    args = parser.parse_args()
    ct.init()
    torch.set_num_threads(1)

    numel = args.megabytes * 2**20 // 4 // args.tensors
    variants = {}
    for zero_copy in (True, False):
        model = Gradients(args.tensors, numel)
        optimizer = ct.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
            named_parameters=[(f'{zero_copy}.{name}', p) for name, p in model.named_parameters()],
            zero_copy_gradients=zero_copy)
        variants['zero-copy' if zero_copy else 'copy'] = (model, optimizer, [])

    for step in range(args.warmup + args.steps):
        for model, optimizer, samples in variants.values():
            phases = _timed_step(model, optimizer)
            if step >= args.warmup:
                samples.append(phases)

    # Both paths computed the same training: a benchmark of a wrong result
    # would be worthless.
    (zero_copy_model, _, _), (copy_model, _, _) = variants.values()
    for ours, theirs in zip(zero_copy_model.parameters(), copy_model.parameters()):
        if not torch.equal(ours, theirs):
            raise SystemExit('rank %d: the zero-copy and copy paths trained different weights'
                             % ct.rank())

    for label, (_, _, samples) in variants.items():
        medians = [statistics.median(s[i] for s in samples) * 1e3 for i in range(len(_PHASES))]
        averaged = ct.allreduce(torch.tensor(medians, dtype=torch.float64), op=ct.Average,
                                name=f'bench.{label}')
        if ct.rank() == 0:
            print('%-9s %d ranks, %d MB of gradients: %s' % (
                label, ct.size(), args.megabytes,
                ', '.join('%s %.1f ms' % (phase, value)
                          for phase, value in zip(_PHASES, averaged.tolist()))), flush=True)


if __name__ == '__main__':
    main()
