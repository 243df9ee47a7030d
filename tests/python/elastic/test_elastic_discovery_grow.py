"""The host discovery script lists one more slot mid-run: collectiverun starts a worker, which
joins at the next commit: every rank raises HostsUpdatedInterrupt at the same step, the job
re-forms with it as the last rank, and it receives the state from rank 0. Run as
``collectiverun --host-discovery-script discover_hosts.sh -np 2 --max-np 3`` with the script
listing ``localhost:2`` at the start; rank 0 lists ``localhost:3`` before step 3 and waits
until collectiverun has published the generation that includes the new worker."""

import os

import collective.torch as hvd
import elastic_training as training
from collective.common import elastic_rendezvous


def _list_slots(slots):
    with open(os.environ['COLLECTIVE_TEST_HOSTS_FILE'], 'w') as f:
        f.write(f'localhost:{slots}\n')


def test_a_slot_listed_by_the_discovery_script_adds_a_worker():
    def hook(state, step, phase):
        if (os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '0' and hvd.rank() == 0 and
                (step, phase) == (3, 'start')):
            _list_slots(3)
            elastic_rendezvous._wait_until(
                lambda: elastic_rendezvous.read_world().generation > 0, 'the grown generation')

    state, model, facts = training.train(hook)
    training.check_grown_job(state, model, facts, added=2)
