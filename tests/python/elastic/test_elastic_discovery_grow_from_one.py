"""An elastic job of one worker grows to two: the DistributedOptimizer made while the job had
one rank must sum the gradients once it has two. Horovod registers the optimizer's hooks in an
elastic job whatever its size (``HOROVOD_ELASTIC=1``, which collectiverun sets for its workers
as horovodrun does); without them the two ranks would each step on their half of the batch.

Run as ``collectiverun --host-discovery-script discover_hosts.sh -np 1 --max-np 2`` with the
script listing ``localhost:1`` at the start; rank 0 lists ``localhost:2`` before step 3 and
waits until collectiverun has published the generation that includes the new worker."""

import os

import collective.torch as hvd
import elastic_training as training
from collective.common import elastic_rendezvous


def test_an_optimizer_made_for_one_rank_reduces_once_the_job_grows():
    assert os.environ['HOROVOD_ELASTIC'] == '1'

    def hook(state, step, phase):
        if (os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '0' and hvd.rank() == 0 and
                (step, phase) == (3, 'start')):
            with open(os.environ['COLLECTIVE_TEST_HOSTS_FILE'], 'w') as f:
                f.write('localhost:2\n')
            elastic_rendezvous._wait_until(
                lambda: elastic_rendezvous.read_world().generation > 0, 'the grown generation')

    state, model, facts = training.train(hook, distributed_optimizer=True)
    training.check_grown_job(state, model, facts, added=1)
