"""The host discovery script lists one slot fewer mid-epoch: collectiverun stops the newest
worker (SIGTERM), and the survivors roll back to their last commit, re-form without it and
finish with every sample processed once per epoch and the same weights, equal to one
process's. Run as ``collectiverun --host-discovery-script discover_hosts.sh --min-np 2 -np 3``
with the script listing ``localhost:3`` at the start; rank 0 lists ``localhost:2`` at step 5,
and worker 2 waits in that step, its weights updated, until collectiverun stops it."""

import os
import signal

import collective.torch as hvd
import elastic_training as training


def test_a_slot_the_discovery_script_drops_stops_the_newest_worker():
    def hook(state, step, phase):
        if os.environ['COLLECTIVE_ELASTIC_GENERATION'] != '0' or step != 5:
            return
        if hvd.rank() == 0 and phase == 'start':
            with open(os.environ['COLLECTIVE_TEST_HOSTS_FILE'], 'w') as f:
                f.write('localhost:2\n')
        if training.worker() == 2 and phase == 'updated':
            signal.pause()  # until collectiverun's SIGTERM ends this worker

    state, model, facts = training.train(hook)
    assert training.worker() != 2
    assert (hvd.rank(), hvd.size()) == (training.worker(), 2)
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    assert facts['resets'] == 1
    training.check_result(state, model)
