"""A worker added while another dies: rank 0 asks collectiverun for a worker (SIGUSR1) and, in
the same step, worker 2 dies after the others updated their weights. The newcomer, started for
the generation with the dying worker in it, joins the latest one instead. Run as
``collectiverun --elastic --min-np 2 --max-np 4 -np 3``."""

import os
import signal

import collective.torch as hvd
import elastic_training as training


def test_a_newcomer_joins_the_generation_after_a_death():
    def hook(state, step, phase):
        if os.environ['COLLECTIVE_ELASTIC_GENERATION'] != '0' or step != 3:
            return
        if phase == 'start' and hvd.rank() == 0:
            os.kill(os.getppid(), signal.SIGUSR1)  # the parent is collectiverun
        if phase == 'updated' and training.worker() == 2:
            training.die()

    state, model, facts = training.train(hook)
    training.report(facts)
    # Workers 0, 1 and 3 are ranks 0, 1 and 2 of the generation after both.
    assert training.worker() in (0, 1, 3)
    assert (hvd.rank(), hvd.size()) == ({0: 0, 1: 1, 3: 2}[training.worker()], 3)
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '2'
    if training.worker() == 3:
        assert facts['first_step'] >= 3 and facts['resets'] == 0
    training.check_result(state, model)
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
