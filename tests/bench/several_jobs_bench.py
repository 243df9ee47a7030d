"""Two jobs on one daemon, against each job alone and against two daemons.

    /usr/bin/python3 tests/bench/several_jobs_bench.py [--build build] [--rounds 3]

Job A is collective-bench's ResNet-50 gradient step (zero-copy, 2 ranks), job
B its 4-byte allreduce latency loop (2 ranks). Each round runs, on the same
machine one after the other:
  * A alone, then B alone, on one resident collectived;
  * A and B at once on that daemon (two jobs, one engine thread);
  * A and B at once, each with a private daemon of its own (what a node
    without a shared service would run).
It prints each figure's median over the rounds and the ratios that matter:
each job beside the other against the same job alone (what sharing the
daemon costs a job), and one daemon for two jobs against two private
daemons. collective-bench checks every result; a run that fails fails this
script. Timings on a shared machine are noisy: compare ratios within a run.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def bench(build, socket, args):
    """collective-bench with `args` against `socket` (None: a private daemon),
    started now; returns the process."""
    command = [str(build / 'bin' / 'collective-bench'), '--json', '--clients', '2'] + args
    if socket is not None:
        command += ['--socket', socket]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process, key):
    out, err = process.communicate(timeout=600)
    if process.returncode != 0:
        sys.exit(f'collective-bench failed ({process.returncode}):\n{err}')
    for line in out.splitlines():
        if line.startswith('{'):
            measurement = json.loads(line)
            if measurement.get('system') == 'collectived' and key in measurement:
                return measurement[key]
    sys.exit(f'collective-bench printed no {key}:\n{out}\n{err}')


RESNET = ['--mode', 'resnet', '--placement', 'zerocopy', '--steps', '40']
LATENCY = ['--mode', 'latency', '--latency-iterations', '4000']


def start_daemon(build, directory):
    socket = os.path.join(directory, 'collectived.sock')
    daemon = subprocess.Popen(
        [str(build / 'bin' / 'collectived'), '--socket', socket, '--default-arena-bytes',
         '256MiB'], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(socket):
        if daemon.poll() is not None or time.monotonic() > deadline:
            sys.exit(f'collectived did not start: {daemon.stderr.read()}')
        time.sleep(0.05)
    return daemon, socket


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--build', default=str(ROOT / 'build'))
    parser.add_argument('--rounds', type=int, default=3)
    options = parser.parse_args()
    build = pathlib.Path(options.build)
    figures = {name: [] for name in ('A alone', 'B alone', 'A beside B', 'B beside A',
                                     'A, own daemon', 'B, own daemon')}
    with tempfile.TemporaryDirectory(prefix='cj-') as directory:
        daemon, socket = start_daemon(build, directory)
        try:
            for _ in range(options.rounds):
                figures['A alone'].append(result(bench(build, socket, RESNET), 'step_ms'))
                figures['B alone'].append(result(bench(build, socket, LATENCY), 'p50_us'))
                a, b = bench(build, socket, RESNET), bench(build, socket, LATENCY)
                figures['B beside A'].append(result(b, 'p50_us'))
                figures['A beside B'].append(result(a, 'step_ms'))
                a, b = bench(build, None, RESNET), bench(build, None, LATENCY)
                figures['B, own daemon'].append(result(b, 'p50_us'))
                figures['A, own daemon'].append(result(a, 'step_ms'))
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f'{options.rounds} rounds, 2 ranks per job; medians (ResNet-50 step in ms, '
          '4-byte allreduce p50 in us)')
    for name, value in median.items():
        print(f'  {name:16} {value:10.2f}')
    print('ratios')
    print(f'  A beside B / A alone          {median["A beside B"] / median["A alone"]:.2f}')
    print(f'  B beside A / B alone          {median["B beside A"] / median["B alone"]:.2f}')
    print(f'  A: one daemon / own daemons   {median["A beside B"] / median["A, own daemon"]:.2f}')
    print(f'  B: one daemon / own daemons   {median["B beside A"] / median["B, own daemon"]:.2f}')


if __name__ == '__main__':
    main()
