"""The host discovery script moves the job between stand-in nodes: each host it lists is a node
with a collectived of its own, the daemons of the job's hosts an MPI world that collectiverun
starts anew whenever the hosts change.

Run as ``collectiverun --host-discovery-script discover_hosts.sh --min-np 2 -np 3`` with the
script listing ``localhost:2`` and ``127.0.0.1:1`` at the start: generation 0 runs workers 0
and 1 on one node and worker 2 on another. Before step 3 rank 0 drops ``127.0.0.1``:
collectiverun stops worker 2 (its host is gone), and the survivors roll back and re-form on
one node (generation 1). At that generation's first step rank 0 lists ``127.0.0.2:1``: a
worker is started on the new host and joins at the next commit (generation 2, two nodes
again). The job ends with every sample processed once per epoch and one process's weights on
every rank. (machines_test runs it with other machines' names: ``training.node_names()``.)"""

import os
import signal
import sys
import time

import collective.torch as hvd
import elastic_training as training
from collective.common import elastic_rendezvous


def _list_hosts(*hosts):
    with open(os.environ['COLLECTIVE_TEST_HOSTS_FILE'], 'w') as f:
        f.write(''.join(f'{host}\n' for host in hosts))


def _generation():
    return int(os.environ['COLLECTIVE_ELASTIC_GENERATION'])


def test_the_job_moves_from_a_removed_node_to_an_added_one():
    seen = {}
    times = {}
    first, _, third = training.node_names()

    def hook(state, step, phase):
        generation = _generation()
        seen.setdefault(generation, (hvd.size(), hvd.local_size(), hvd.cross_size(),
                                     hvd.local_rank(), hvd.cross_rank()))
        if generation == 0 and step == 3:
            if hvd.rank() == 0 and phase == 'start':
                times['removed'] = time.monotonic()
                _list_hosts(f'{first}:2')
            if training.worker() == 2 and phase == 'updated':
                signal.pause()  # until collectiverun's SIGTERM ends this worker
        if generation == 1 and phase == 'start' and 'one_node' not in times:
            times['one_node'] = time.monotonic()
            if hvd.rank() == 0:
                # Listed only now, so that the job re-forms on one node
                # first; the new host's worker is started within the
                # script's next runs, and this step's commit meets it.
                _list_hosts(f'{first}:2', f'{third}:1')
                elastic_rendezvous._wait_until(
                    lambda: elastic_rendezvous.read_world().generation > 1, 'the grown generation')
        if generation == 2 and phase == 'start' and 'two_nodes' not in times:
            times['two_nodes'] = time.monotonic()

    state, model, facts = training.train(hook)
    worker = training.worker()
    assert worker != 2
    assert _generation() == 2
    # Nodes in the order of the survivors: localhost (workers 0 and 1), then
    # the added host (worker 3).
    assert (hvd.size(), hvd.cross_size()) == (3, 2)
    expected = {0: (0, 0, 2), 1: (1, 0, 2), 3: (2, 1, 1)}[worker]
    assert (hvd.rank(), hvd.cross_rank(), hvd.local_size()) == expected
    if worker == 3:
        assert facts['resets'] == 0 and facts['first_step'] > 3
        assert set(seen) == {2}
    else:
        # Generation 0 across two nodes, generation 1 on one.
        assert seen[0][:3] == (3, 2, 2) and seen[1][:3] == (2, 2, 1)
        assert facts['resets'] == 2  # the rollback, then the added worker
        if hvd.rank() == 0:
            print(f'elastic across nodes: {times["one_node"] - times["removed"]:.2f} s from the '
                  f'host removed to the one-node job\'s first step; '
                  f'{times["two_nodes"] - times["one_node"]:.2f} s to the first step on the '
                  f'added host\'s node (process start included)', file=sys.__stdout__,
                  flush=True)
    training.check_result(state, model)
