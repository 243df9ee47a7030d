"""A training step's gradient exchange: collective.tensorflow against TensorFlow's own collectives.

    PYTHONPATH=build/python build/tf-venv/bin/python tests/bench/tensorflow_collectives_bench.py \\
        --collectiverun build/bin/collectiverun --workers 4

One invocation runs, one after the other with the same number of workers on this host, the
same gradient set (by default ResNet-50's 161 tensors, tests/bench/workloads/
resnet50_gradients.txt, about 102 MB of float32) summed over the workers at every step:

* collective.tensorflow: ``grouped_allreduce`` of the gradient list inside a ``tf.function``,
  the workers being the ranks of a ``collectiverun`` job (a private collectived), or with
  ``--nodes N`` the trainers of N stand-in nodes: N collectived started by ``mpirun`` (TCP
  between them, as across machines), the workers shared out among them;
* TensorFlow: ``tf.distribute.MultiWorkerMirroredStrategy`` with its RING implementation, the
  workers separate processes on localhost (TF_CONFIG), the list summed by the replica context's
  ``all_reduce`` inside ``strategy.run``, as Keras sums gradients under that strategy.

* collective.tensorflow with arena tensors: the same step on gradients that ``hvd.to_arena``
  placed in the trainer's shared-memory arena once (so nothing is copied in; the outputs are
  arena outputs, written by the daemon, with ``COLLECTIVE_ARENA_BYTES`` set to
  ``--arena-bytes`` so that both fit), on one node only;
* the C++ zero-copy step: ``collective-bench --mode resnet --placement zerocopy`` (found
  beside ``--collectiverun``) on the same workload and workers, its tensors in the arena and
  its results read where the daemon left them: the floor the arena phase is measured against;
  and, with ``cpp-inplace`` in ``--phases``, the same in its ``inplace`` placement, each
  worker's result written into its own arena tensor as the arena phase's outputs are.

Each worker times every step (after the warm-up steps) and checks the sums; worker 0 reports
the median step. The phases alternate ``--repeats`` times, so that whatever else the machine
does falls on all; the report gives each run's medians, the median of those, the ratio of
TensorFlow's to collective.tensorflow's, and that of the arena phase to the C++ zero-copy
step (the goal: within 1.3x). ``--phases`` picks phases. It fails (status 1) when a sum is
wrong or a worker fails.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

_RESULT_PREFIX = 'BENCH_RESULT '
_DEFAULT_WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'workloads',
                                 'resnet50_gradients.txt')


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, default=4, help='workers (ranks) in each phase')
    parser.add_argument('--steps', type=int, default=10, help='timed steps per run')
    parser.add_argument('--warmup', type=int, default=3, help='untimed steps first')
    parser.add_argument('--repeats', type=int, default=3, help='runs of each phase, alternating')
    parser.add_argument('--workload', default=_DEFAULT_WORKLOAD,
                        help='gradient shapes: lines of "name element_count AxBxC"')
    parser.add_argument('--max-tensors', type=int, default=0,
                        help='only the first this many gradients (0: all)')
    parser.add_argument('--collectiverun', default='build/bin/collectiverun',
                        help='the launcher of the collective.tensorflow phase (its directory '
                        'also gives collectived and collectivectl for --nodes)')
    parser.add_argument('--nodes', type=int, default=1,
                        help='stand-in nodes of the collective.tensorflow phase: 1 is one '
                        'collectiverun job; more are daemons under mpirun (workers must divide)')
    parser.add_argument('--timeout', type=float, default=600,
                        help='seconds a run may take before it counts as failed')
    parser.add_argument('--phases', default='collective,arena,cpp,tensorflow',
                        help='the phases to run, comma-separated: collective, arena (on one '
                        'node only), cpp (the C++ zero-copy step) and tensorflow')
    parser.add_argument('--arena-bytes', type=int, default=1 << 30,
                        help='each trainer\'s arena in the arena phase (COLLECTIVE_ARENA_BYTES):'
                        ' room for the gradients and the outputs')
    parser.add_argument('--arena', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--role', choices=['parent', 'collective', 'tensorflow'],
                        default='parent', help=argparse.SUPPRESS)
    parser.add_argument('--index', type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


def read_shapes(path, max_tensors):
    shapes = []
    with open(path, encoding='utf-8') as workload:
        for line in workload:
            fields = line.split()
            if not fields or fields[0].startswith('#'):
                continue
            if len(fields) != 3:
                raise SystemExit(f'{path}: the line "{line.strip()}" is not '
                                 '"name element_count AxBxC".')
            shape = [int(d) for d in fields[2].split('x')]
            shapes.append(shape)
    return shapes[:max_tensors] if max_tensors else shapes


def configure(tf, workers):
    """The CPU only, and each worker's TensorFlow its share of the cores, in both phases alike."""
    tf.config.set_visible_devices([], 'GPU')
    threads = max(1, (os.cpu_count() or 1) // workers)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def make_gradients(tf, shapes, worker):
    # Worker w's gradients are all w + 1, so every sum is workers * (workers + 1) / 2.
    return [tf.fill(shape, float(worker + 1)) for shape in shapes]


def check_sums(reduced, workers, label):
    expected = workers * (workers + 1) / 2
    for tensor in (reduced[0], reduced[-1]):
        flat = tensor.numpy().reshape(-1)
        if flat[0] != expected or flat[-1] != expected:
            raise SystemExit(f'{label}: a summed gradient holds {flat[0]} and {flat[-1]} where '
                             f'{expected} was expected.')


def time_steps(step, args):
    """Runs the warm-up steps, then the timed ones; the last result and the steps' seconds."""
    for _ in range(args.warmup):
        step()
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        result = step()
        seconds.append(time.perf_counter() - start)
    return result, seconds


def report(worker, seconds, shapes):
    if worker == 0:
        values = sum(_numel(s) for s in shapes)
        print(_RESULT_PREFIX + json.dumps({'median_s': statistics.median(seconds),
                                           'tensors': len(shapes), 'megabytes': values * 4e-6}),
              flush=True)


def _numel(shape):
    count = 1
    for d in shape:
        count *= d
    return count


def collective_worker(args):
    import tensorflow as tf

    import collective.tensorflow as hvd

    hvd.init()
    configure(tf, hvd.size())
    shapes = read_shapes(args.workload, args.max_tensors)
    gradients = make_gradients(tf, shapes, hvd.rank())
    label = 'collective.tensorflow'
    if args.arena:
        label += ' (arena tensors)'
        gradients = hvd.to_arena(gradients)
        outside = sum(not hvd.in_arena(g) for g in gradients)
        if outside:
            raise SystemExit(f'{label}: {outside} gradients did not fit in the arena; raise '
                             '--arena-bytes.')

    @tf.function
    def step():
        return hvd.grouped_allreduce(gradients, op=hvd.Sum)

    reduced, seconds = time_steps(step, args)
    check_sums(reduced, hvd.size(), label)
    report(hvd.rank(), seconds, shapes)
    hvd.shutdown()


def tensorflow_worker(args):
    import tensorflow as tf

    configure(tf, args.workers)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    shapes = read_shapes(args.workload, args.max_tensors)
    gradients = make_gradients(tf, shapes, args.index)

    def replica_step():
        return tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, gradients, options=options)

    @tf.function
    def step():
        return strategy.run(replica_step)

    reduced, seconds = time_steps(step, args)
    check_sums(reduced, args.workers, 'MultiWorkerMirroredStrategy')
    report(args.index, seconds, shapes)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(('localhost', 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _child_args(args, role, arena=False):
    return [sys.executable, os.path.abspath(__file__), '--role', role,
            '--workers', str(args.workers), '--steps', str(args.steps),
            '--warmup', str(args.warmup), '--workload', args.workload,
            '--max-tensors', str(args.max_tensors)] + (['--arena'] if arena else [])


def _result(outputs, label):
    for output in outputs:
        for line in output.splitlines():
            # collectiverun prefixes each line with the rank ("[0] ").
            if _RESULT_PREFIX in line:
                return json.loads(line.split(_RESULT_PREFIX, 1)[1])
    raise SystemExit(f'{label}: worker 0 reported no result.')


def _wait(processes, deadline, label):
    """The processes' outputs, once all have exited 0; SystemExit when one fails or is late."""
    outputs = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise SystemExit(f'{label}: the workers did not finish within the timeout.')
        outputs.append(output)
        if process.returncode != 0:
            for p in processes:
                p.kill()
            sys.stdout.write(output)
            raise SystemExit(f'{label}: a worker exited with status {process.returncode}.')
    return outputs


def run_collective(args, env, arena=False):
    if args.nodes > 1 and not arena:
        return _run_collective_on_nodes(args, env)
    command = ([args.collectiverun, '-np', str(args.workers)] +
               _child_args(args, 'collective', arena))
    if arena:
        env = dict(env, COLLECTIVE_ARENA_BYTES=str(args.arena_bytes))
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    outputs = _wait([process], time.monotonic() + args.timeout, 'collective.tensorflow')
    return _result(outputs, 'collective.tensorflow')


def run_cpp(args, env, placement='zerocopy'):
    """The C++ step of collective-bench in ``placement`` on the same gradients and workers
    (its step's median, in the workers' report's form)."""
    bench = os.path.join(os.path.dirname(os.path.abspath(args.collectiverun)), 'collective-bench')
    if not os.path.exists(bench):
        raise SystemExit(f'{bench} is missing: build the collective-bench target, or leave cpp '
                         'out of --phases.')
    workload = args.workload
    with tempfile.TemporaryDirectory(prefix='collective-bench-') as directory:
        if args.max_tensors:
            workload = os.path.join(directory, 'workload.txt')
            with open(args.workload, encoding='utf-8') as source, \
                    open(workload, 'w', encoding='utf-8') as kept:
                lines = [line for line in source if line.split() and
                         not line.startswith('#')]
                kept.writelines(lines[:args.max_tensors])
        command = [bench, '--clients', str(args.workers), '--json', '--workload', workload,
                   '--mode', 'resnet', '--steps', str(args.steps), '--placement', placement]
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=args.timeout,
                              check=False)
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        raise SystemExit(f'collective-bench exited with status {done.returncode}.')
    for line in done.stdout.splitlines():
        if line.startswith('{'):
            record = json.loads(line)
            if record.get('system') == 'collectived' and record.get('mode') == 'resnet':
                return {'median_s': record['step_ms'] / 1e3}
    raise SystemExit('collective-bench printed no ResNet step.')


def _await_daemon(collectivectl, socket_path, deadline, mpirun):
    """Returns once the daemon on ``socket_path`` answers; SystemExit if mpirun ends first or
    the deadline passes."""
    while time.monotonic() < deadline:
        if mpirun.poll() is not None:
            raise SystemExit(f'mpirun exited ({mpirun.returncode}) before {socket_path} served: '
                             f'{mpirun.stdout.read()}')
        answered = subprocess.run([collectivectl, '--socket', socket_path, '--timeout', '1',
                                   'health'], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, check=False)
        if answered.returncode == 0:
            return
    raise SystemExit(f'the daemon on {socket_path} did not answer in time.')


def _run_collective_on_nodes(args, env):
    """The collective phase on ``args.nodes`` daemons that mpirun starts, each with its share
    of the workers (as tests/integration/multinode does)."""
    if args.workers % args.nodes:
        raise SystemExit(f'--workers {args.workers} is not a multiple of --nodes {args.nodes}.')
    bin_dir = os.path.dirname(os.path.abspath(args.collectiverun))
    per_node = args.workers // args.nodes
    with tempfile.TemporaryDirectory(prefix='collective-bench-') as directory:
        sockets = [os.path.join(directory, f'node{n}.sock') for n in range(args.nodes)]
        daemon = (f'exec {os.path.join(bin_dir, "collectived")} --socket '
                  f'{directory}/node$OMPI_COMM_WORLD_RANK.sock')
        mpirun = subprocess.Popen(
            ['mpirun', '--allow-run-as-root', '--oversubscribe', '--mca', 'btl', 'tcp,self',
             '-np', str(args.nodes), '/bin/sh', '-c', daemon],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            for socket_path in sockets:
                _await_daemon(os.path.join(bin_dir, 'collectivectl'), socket_path, deadline,
                              mpirun)
            processes = []
            for node, socket_path in enumerate(sockets):
                for local in range(per_node):
                    worker_env = dict(env, COLLECTIVE_SOCKET=socket_path,
                                      COLLECTIVE_LOCAL_RANK=str(local),
                                      COLLECTIVE_LOCAL_SIZE=str(per_node),
                                      WORLD_SIZE=str(args.workers))
                    processes.append(subprocess.Popen(
                        _child_args(args, 'collective'), env=worker_env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outputs = _wait(processes, time.monotonic() + args.timeout, 'collective.tensorflow')
        finally:
            # mpirun passes SIGTERM on to the daemons, which leave cleanly.
            mpirun.terminate()
            mpirun.communicate(timeout=60)
    return _result(outputs, 'collective.tensorflow')


def run_tensorflow(args, env):
    ports = _free_ports(args.workers)
    cluster = {'worker': [f'localhost:{port}' for port in ports]}
    processes = []
    for index in range(args.workers):
        worker_env = dict(env)
        worker_env['TF_CONFIG'] = json.dumps(
            {'cluster': cluster, 'task': {'type': 'worker', 'index': index}})
        processes.append(subprocess.Popen(
            _child_args(args, 'tensorflow') + ['--index', str(index)], env=worker_env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = _wait(processes, time.monotonic() + args.timeout, 'MultiWorkerMirroredStrategy')
    return _result(outputs, 'MultiWorkerMirroredStrategy')


_PHASES = {
    'collective': ('collective.tensorflow', lambda args, env: run_collective(args, env)),
    'arena': ('collective.tensorflow, arena tensors',
              lambda args, env: run_collective(args, env, arena=True)),
    'cpp': ('C++ zero-copy', run_cpp),
    'cpp-inplace': ('C++ in place', lambda args, env: run_cpp(args, env, 'inplace')),
    'tensorflow': ('MultiWorkerMirroredStrategy (RING)', run_tensorflow),
}


def parent(args):
    env = dict(os.environ)
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    phases = [p for p in args.phases.split(',') if p]
    unknown = sorted(set(phases) - _PHASES.keys())
    if unknown:
        raise SystemExit(f'--phases: unknown {unknown}; choose among {sorted(_PHASES)}.')
    if args.nodes > 1:
        phases = [p for p in phases if p in ('collective', 'tensorflow')]
    # The C++ placement that writes each worker's result into its own arena block, as the
    # arena phase's outputs are written: what the step costs with that one write more per
    # worker than zero-copy's shared result.
    medians = {phase: [] for phase in phases}
    first = None
    for repeat in range(args.repeats):
        results = {}
        for phase in phases:
            results[phase] = _PHASES[phase][1](args, env)
            medians[phase].append(results[phase]['median_s'])
            if 'tensors' in results[phase]:
                first = first or results[phase]
        print(f'run {repeat}: ' + ', '.join(
            f'{_PHASES[p][0]} {results[p]["median_s"] * 1e3:.1f} ms' for p in phases), flush=True)
    median = {phase: statistics.median(values) for phase, values in medians.items()}
    where = f' on {args.nodes} stand-in nodes' if args.nodes > 1 else ''
    summary = ', '.join(f'{_PHASES[p][0]} {median[p] * 1e3:.1f} ms' for p in phases)
    ratios = []
    if 'collective' in median and 'tensorflow' in median:
        ratios.append(f'ratio {median["tensorflow"] / median["collective"]:.2f}x')
    if 'arena' in median and 'cpp' in median:
        ratios.append(f'arena/C++ zero-copy {median["arena"] / median["cpp"]:.2f}x '
                      '(goal: 1.3x or less)')
    if 'arena' in median and 'cpp-inplace' in median:
        ratios.append(f'arena/C++ in place {median["arena"] / median["cpp-inplace"]:.2f}x')
    shape = (f'{first["tensors"]} gradients, {first["megabytes"]:.1f} MB per step'
             if first else 'the C++ step only')
    print(f'{args.workers} workers{where}, {shape}: median step {summary}'
          + ''.join(', ' + r for r in ratios), flush=True)


def main():
    args = parse_args()
    if args.role == 'collective':
        collective_worker(args)
    elif args.role == 'tensorflow':
        tensorflow_worker(args)
    else:
        parent(args)


if __name__ == '__main__':
    main()
