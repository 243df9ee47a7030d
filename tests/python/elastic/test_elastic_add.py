"""A worker added mid-run joins at the next commit: every rank raises HostsUpdatedInterrupt at
the same step, the job re-forms with it as the last rank, and it receives the model, the
optimizer's momentum and the objects of the state from rank 0. Run as ``collectiverun --elastic
-np 2 --max-np 3``: rank 0 asks collectiverun for a worker (SIGUSR1) before step 3."""

import os
import signal

import collective.torch as hvd
import elastic_training as training


def test_added_worker_receives_the_state():
    def hook(state, step, phase):
        if (os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '0' and hvd.rank() == 0 and
                (step, phase) == (3, 'start')):
            os.kill(os.getppid(), signal.SIGUSR1)  # the parent is collectiverun

    state, model, facts = training.train(hook)
    training.check_grown_job(state, model, facts, added=2)
