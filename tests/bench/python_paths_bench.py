"""The Python path beside the C++ path and plain MPI, in one run.

    /usr/bin/python3 tests/bench/python_paths_bench.py [--ranks 4] [--rounds 3]

Each round runs, one after the other on the same machine:
  * collective-bench's ResNet-50 gradient step through the C++ API in its
    three placements (copy: private tensors copied in and out; inplace:
    arena tensors, the result written back into them; zerocopy: arena
    tensors, the result read where the daemon left it) and its 4-byte
    allreduce latency, against plain MPI (MPI_Allreduce in place) with the
    same number of processes; the latency is measured again after the
    Python job, and the round's C++ and MPI latency is the mean of the two;
  * this file as a job of --ranks trainers under collectiverun, measuring the
    same through collective.torch: the ResNet-50 gradient set (the shapes of
    tests/bench/workloads/resnet50_gradients.txt) through `allreduce_async_`
    per tensor then `synchronize`, on ordinary tensors (copied into the arena
    and back) and on arena tensors (`hvd.empty`: nothing copied); the 4-byte
    allreduce the same two ways and through the binding's call under
    `allreduce_` with its arguments made once (as a C++ caller makes them),
    taking turns in blocks, so that what collective.torch's own work adds is
    measured within one job; and
    DistributedOptimizer around a torchvision ResNet-50 with a real backward
    on small synthetic images, taking turns step by step with the same model
    under a local optimizer.
It prints the medians over the rounds and the ratios of Python to the C++
placement that does the same work (copy for ordinary tensors, inplace for
arena tensors), to C++ at its fastest (zerocopy), and to MPI; and the median
of each round's own Python/C++ ratio, which drift between rounds moves less.
The DistributedOptimizer lines are the wait in `synchronize()` after the
backward, which holds the reduction the backward did not hide and the wait
for ranks whose backward ends later; that wait counted from the last rank's
backward end instead (the reduction's own part); how much later the last
rank's backward ends with the local optimizer, where nothing is reduced (the
ranks' own spread: with more ranks than cores, their share of the cores
differs from step to step); and the whole step's excess over the local step.

Timings on a shared machine are noisy: read the ratios of one run, and
compare runs only on the same machine. The worker checks its results (the
reductions' values, every rank's weights identical after training) and
fails rather than report the speed of a wrong answer.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

_MARK = 'PYTHON_PATHS '
_HERE = os.path.dirname(os.path.abspath(__file__))


def _workload_shapes(path):
    """The gradient shapes of a workload file: `name numel AxBx...` per line."""
    shapes = []
    with open(path) as lines:
        for line in lines:
            fields = line.split()
            if len(fields) == 3:
                shapes.append(tuple(int(d) for d in fields[2].split('x')))
    return shapes


# ---------------------------------------------------------------- the worker

def _median_ms(samples):
    return statistics.median(samples) * 1e3


def _gradient_set(hvd, torch, tensors, steps, label):
    """Median seconds of a step: allreduce_async_ of every tensor, then synchronize."""
    size = hvd.size()
    for t in tensors:
        t.fill_(hvd.rank() + 1.0)
    samples = []
    for step in range(steps + 1):  # the first step warms up
        hvd.barrier()
        start = time.perf_counter()
        handles = [hvd.allreduce_async_(t, op=hvd.Average, name=f'{label}.{i}')
                   for i, t in enumerate(tensors)]
        for handle in handles:
            hvd.synchronize(handle)
        if step:
            samples.append(time.perf_counter() - start)
    expected = (size + 1) / 2.0
    for t in tensors:
        if not torch.all(t == expected):
            raise SystemExit(f'rank {hvd.rank()}: {label}: the average is wrong')
    return samples


def _now():
    """CLOCK_MONOTONIC: one clock for every process on the machine (ranks compare stamps)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _binding_call(hvd, tensor, label):
    """The call under `hvd.allreduce_(tensor, op=hvd.Max, name=label)`: the binding's
    synchronous allreduce with its arguments made once, as a C++ caller of libcollective's
    Client makes them. Timed in the same job as `allreduce_`, it shows what collective.torch's
    own work adds, apart from the machine's drift between jobs."""
    from collective.common import connection, reduce_ops
    from collective.torch import tensor_args
    client = connection.current().client
    name = connection.call_name('allreduce', label, 0)
    address = tensor.data_ptr()
    spec = (address, tensor_args.DTYPE_CODES[tensor.dtype], tensor.shape)
    op = reduce_ops.SHORT_PATH_CODES[hvd.Max]
    return lambda: client.allreduce(name, spec, address, op, 1.0, 1.0, 0)


def _latency(hvd, tensors, iterations, blocks=10):
    """Seconds of each 4-byte allreduce_, back to back, per label of `tensors` (label:
    tensor), and of the binding's call under it on an arena tensor of its own
    (`latency_binding`).

    The labels take turns in blocks, so that what the machine does meanwhile
    (the daemon's and the other ranks' leftovers from the previous phase, other
    load) falls on every label alike rather than on whichever ran first."""
    calls = {label: (lambda t=tensor, label=label: hvd.allreduce_(t, op=hvd.Max, name=label))
             for label, tensor in tensors.items()}
    tensors = dict(tensors, latency_binding=hvd.empty(1))
    calls['latency_binding'] = _binding_call(hvd, tensors['latency_binding'], 'latency_binding')
    samples = {label: [] for label in tensors}
    per_block = max(1, iterations // blocks)
    for tensor in tensors.values():
        tensor.fill_(hvd.rank() + 1.0)  # the maximum: the number of ranks, from the first call
    for _ in range(blocks):
        for label, call in calls.items():
            for i in range(per_block + 20):
                start = time.perf_counter()
                call()
                if i >= 20:  # the first few after a switch wake a cold path
                    samples[label].append(time.perf_counter() - start)
    for label, tensor in tensors.items():
        if tensor.item() != hvd.size():
            raise SystemExit(f'rank {hvd.rank()}: {label}: the maximum is {tensor.item()}, '
                             f'not {hvd.size()}')
    return samples


def _optimizer_steps(hvd, torch, steps, batch, image):
    """Per-step seconds, by figure: DistributedOptimizer's backward (`optimizer_backward`),
    its wait in synchronize() after it (`optimizer_synchronize`), that wait counted from the
    end of the last rank's backward (`optimizer_after_last_backward`), its whole step
    (`optimizer_step`); and the same step under a local optimizer, taking turns with it
    (`local_step`), with how long after this rank's backward the last rank's ended there
    (`local_backward_lag`): what ranks that share cores wait for each other with no
    reduction at all."""
    import torchvision
    torch.manual_seed(0)
    models = [torchvision.models.resnet50(num_classes=10) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    distributed = hvd.DistributedOptimizer(
        torch.optim.SGD(models[0].parameters(), lr=0.01),
        named_parameters=models[0].named_parameters())
    local = torch.optim.SGD(models[1].parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(hvd.rank())
    images = torch.randn(batch, 3, image, image, generator=generator)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    loss_of = torch.nn.CrossEntropyLoss()
    samples = collections.defaultdict(list)
    backward_ends, synchronized_at = [], []  # per step: (distributed, local) ends; a time
    for step in range(steps + 1):
        hvd.barrier()
        start = _now()
        distributed.zero_grad()
        loss_of(models[0](images), labels).backward()
        backward = _now()
        distributed.synchronize()
        synchronized = _now()
        with distributed.skip_synchronize():
            distributed.step()
        end = _now()

        hvd.barrier()
        local_start = _now()
        local.zero_grad()
        loss_of(models[1](images), labels).backward()
        local_backward = _now()
        local.step()
        local_end = _now()
        if step:
            samples['optimizer_backward'].append(backward - start)
            samples['optimizer_synchronize'].append(synchronized - backward)
            samples['optimizer_step'].append(end - start)
            samples['local_step'].append(local_end - local_start)
            backward_ends.append((backward, local_backward))
            synchronized_at.append(synchronized)
    # The ranks' clocks are one (CLOCK_MONOTONIC): the last rank's backward end of each
    # step, in both runs.
    last_ends = hvd.allreduce(torch.tensor(backward_ends, dtype=torch.float64), op=hvd.Max,
                              name='bench.backward_ends').tolist()
    for (_, own_local), (last, last_local), synchronized in zip(backward_ends, last_ends,
                                                                synchronized_at):
        samples['optimizer_after_last_backward'].append(synchronized - last)
        samples['local_backward_lag'].append(last_local - own_local)
    # Every rank trained the same weights (the gradients were averaged): the
    # ranks' digests of them are equal.
    flat = torch.cat([p.detach().reshape(-1) for p in models[0].parameters()]).double()
    digests = hvd.allgather(torch.stack([flat.sum(), (flat * flat).sum()]).reshape(1, 2),
                            name='bench.weights')
    if not torch.equal(digests, digests[:1].expand_as(digests)):
        raise SystemExit(f'rank {hvd.rank()}: the ranks trained different weights')
    return samples


def worker(args):
    import torch
    import collective.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    shapes = _workload_shapes(args.workload)
    results = {}
    # One set at a time: the arena holds one ResNet-50 gradient set, and the
    # optimizer's gradients later.
    for label, make in (('gradients_copy', torch.empty), ('gradients_arena', hvd.empty)):
        results[label + '_ms'] = _median_ms(_gradient_set(
            hvd, torch, [make(shape) for shape in shapes], args.steps, label))
    latency = _latency(hvd, {'latency_copy': torch.empty(1), 'latency_arena': hvd.empty(1)},
                       args.latency_iterations)
    for label, samples in latency.items():
        results[label + '_us'] = _median_ms(samples) * 1e3
    if args.optimizer_steps:
        for key, values in _optimizer_steps(hvd, torch, args.optimizer_steps, args.batch,
                                            args.image).items():
            results[key + '_ms'] = _median_ms(values)
    keys = sorted(results)
    averaged = hvd.allreduce(torch.tensor([results[k] for k in keys], dtype=torch.float64),
                             op=hvd.Average, name='bench.results')
    if hvd.rank() == 0:
        print(_MARK + json.dumps(dict(zip(keys, averaged.tolist()))), flush=True)
    hvd.shutdown()


# ---------------------------------------------------------------- the driver

def _run(command, env=None, timeout=1800):
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f'{" ".join(command)} failed ({done.returncode}):\n{done.stdout[-4000:]}')
    return done.stdout


def _cpp_runs(args, latency_only=False):
    """collective-bench's figures: its ResNet step in every placement (with MPI's), unless
    `latency_only`, and its 4-byte latency (with MPI's)."""
    bench = os.path.join(args.bin, 'collective-bench')
    common = [bench, '--clients', str(args.ranks), '--json', '--workload', args.workload]
    latency = ['--mode', 'latency', '--latency-iterations', str(args.latency_iterations),
               '--placement', 'zerocopy', '--compare', 'mpi']
    steps = (
        ['--mode', 'resnet', '--steps', str(args.steps), '--placement', 'both', '--compare',
         'mpi'],
        ['--mode', 'resnet', '--steps', str(args.steps), '--placement', 'inplace'],
    )
    figures = {}
    for run in ([] if latency_only else list(steps)) + [latency]:
        for line in _run(common + run).splitlines():
            if not line.startswith('{'):
                continue
            record = json.loads(line)
            if record.get('system') != 'collectived':
                continue
            if record.get('mode') == 'resnet':
                figures[f'cpp_{record["placement"]}_gradients_ms'] = record['step_ms']
                if 'mpi_step_ms' in record:
                    figures['mpi_gradients_ms'] = record['mpi_step_ms']
            elif record.get('mode') == 'latency':
                figures['cpp_latency_us'] = record['p50_us']
                figures['mpi_latency_us'] = record['mpi_median_us']
    wanted = {'cpp_latency_us', 'mpi_latency_us'}
    if not latency_only:
        wanted |= {'cpp_copy_gradients_ms', 'cpp_zerocopy_gradients_ms',
                   'cpp_inplace_gradients_ms', 'mpi_gradients_ms'}
    if not wanted <= figures.keys():
        sys.exit(f'collective-bench printed no {sorted(wanted - figures.keys())}')
    return figures


def _round(args):
    """One round: C++ and MPI, the Python job, then C++'s and MPI's latency again. The
    latency figures are the mean of the runs before and after the Python job, so that a
    drift of the machine's latency during the round weighs on both sides alike."""
    figures = _cpp_runs(args)
    figures.update(_python_round(args))
    after = _cpp_runs(args, latency_only=True)
    for key in ('cpp_latency_us', 'mpi_latency_us'):
        figures[key] = (figures[key] + after[key]) / 2
    return figures


def _python_round(args):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in (args.python_path, env.get('PYTHONPATH')) if p)
    command = [os.path.join(args.bin, 'collectiverun'), '-np', str(args.ranks), sys.executable,
               os.path.abspath(__file__), '--worker', '--workload', args.workload,
               '--steps', str(args.steps), '--latency-iterations', str(args.latency_iterations),
               '--optimizer-steps', str(args.optimizer_steps), '--batch', str(args.batch),
               '--image', str(args.image)]
    for line in _run(command, env).splitlines():
        text = line.split('] ', 1)[-1]  # collectiverun prefixes each rank's lines
        if text.startswith(_MARK):
            return json.loads(text[len(_MARK):])
    sys.exit('the Python job printed no results')


def _table(rounds, args):
    def median(key):
        return statistics.median(r[key] for r in rounds)

    # Each Python figure beside the C++ placement that does the same (copies
    # in and out; the result written back into the caller's arena tensor),
    # C++ at its fastest (the result read where the daemon left it), and MPI.
    rows = [
        ('ResNet-50 gradients, allreduce_async_, ordinary tensors', 'ms',
         'gradients_copy_ms', 'cpp_copy_gradients_ms', 'cpp_zerocopy_gradients_ms',
         'mpi_gradients_ms'),
        ('ResNet-50 gradients, allreduce_async_, arena tensors', 'ms',
         'gradients_arena_ms', 'cpp_inplace_gradients_ms', 'cpp_zerocopy_gradients_ms',
         'mpi_gradients_ms'),
        ('4-byte allreduce_ p50, ordinary tensor', 'us',
         'latency_copy_us', 'cpp_latency_us', 'cpp_latency_us', 'mpi_latency_us'),
        ('4-byte allreduce_ p50, arena tensor', 'us',
         'latency_arena_us', 'cpp_latency_us', 'cpp_latency_us', 'mpi_latency_us'),
        ('4-byte p50, the binding under allreduce_ (arena tensor)', 'us',
         'latency_binding_us', 'cpp_latency_us', 'cpp_latency_us', 'mpi_latency_us'),
    ]
    print(f'{args.ranks} ranks, medians of {len(rounds)} round(s), one machine. C++ alike: '
          'collective-bench copy placement for ordinary tensors, inplace for arena tensors '
          '(latency: zerocopy); C++ best: zerocopy; MPI: MPI_Allreduce in place')
    print('Py/alike per round: the median over the rounds of each round\'s own ratio, which '
          'the machine\'s drift from round to round moves less')
    print(f'{"":56} {"Python":>9} {"C++alike":>9} {"C++best":>9} {"MPI":>9} {"Py/alike":>8} '
          f'{"Py/best":>8} {"Py/MPI":>8} {"per round":>9}')
    for label, unit, python, alike, best, mpi in rows:
        p, a, b, m = median(python), median(alike), median(best), median(mpi)
        per_round = statistics.median(r[python] / r[alike] for r in rounds)
        print(f'{label:56} {p:7.1f}{unit} {a:7.1f}{unit} {b:7.1f}{unit} {m:7.1f}{unit} '
              f'{p / a:8.2f} {p / b:8.2f} {p / m:8.2f} {per_round:9.2f}')
    # What collective.torch's own work adds to a small allreduce, measured within one job.
    own = statistics.median(r['latency_arena_us'] / r['latency_binding_us'] for r in rounds)
    print(f'{"  allreduce_ (arena tensor) / the binding, same job":56} {"":9} {"":9} {"":9} '
          f'{"":9} {"":8} {"":8} {"":8} {own:9.2f}')
    if args.optimizer_steps:
        best = median('cpp_zerocopy_gradients_ms')
        print(f'DistributedOptimizer, torchvision ResNet-50, batch {args.batch} of '
              f'{args.image}x{args.image} per rank: backward {median("optimizer_backward_ms"):.1f}'
              f' ms, step {median("optimizer_step_ms"):.1f} ms, local step '
              f'{median("local_step_ms"):.1f} ms; against the C++ zero-copy step:')
        lines = (
            ('  wait in synchronize() after the backward', median('optimizer_synchronize_ms')),
            ("  the wait from the end of the last rank's backward",
             median('optimizer_after_last_backward_ms')),
            ("  local step: the last rank's backward ends later by",
             median('local_backward_lag_ms')),
            ('  step minus the local step',
             median('optimizer_step_ms') - median('local_step_ms')),
        )
        for label, figure in lines:
            print(f'{label:56} {figure:7.1f}ms {"":9} {best:7.1f}ms {"":9} {"":8} '
                  f'{figure / best:8.2f}')
    print(_MARK + json.dumps(rounds))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ranks', type=int, default=4)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--steps', type=int, default=10, help='timed gradient-set steps')
    parser.add_argument('--latency-iterations', type=int, default=2000)
    parser.add_argument('--optimizer-steps', type=int, default=5,
                        help='timed DistributedOptimizer steps (0: none)')
    parser.add_argument('--batch', type=int, default=4, help='images per rank per step')
    parser.add_argument('--image', type=int, default=32, help='image side in pixels')
    build = os.path.join(_HERE, os.pardir, os.pardir, 'build')
    parser.add_argument('--bin', default=os.path.join(build, 'bin'),
                        help='where collective-bench and collectiverun are')
    parser.add_argument('--python-path', default=os.path.join(build, 'python'),
                        help="collective.torch's build directory, for PYTHONPATH")
    parser.add_argument('--workload',
                        default=os.path.join(_HERE, 'workloads', 'resnet50_gradients.txt'))
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    rounds = []
    for _ in range(args.rounds):
        rounds.append(_round(args))
    _table(rounds, args)


if __name__ == '__main__':
    main()
