"""A worker killed mid-epoch: the survivors roll back to their last commit, re-form without it
(ranks renumbered, size smaller) and finish with every sample processed once per epoch and the
same weights, equal to one process's. Run as ``collectiverun --elastic --min-np 2 -np 3``."""

import os

import collective.torch as hvd
import elastic_training as training

# The worker that dies, in step 5 of 16 (mid-epoch), once the other ranks
# updated their weights: they must roll back to the last commit.
_VICTIM = 2


def test_survivors_finish_after_a_worker_dies():
    def hook(state, step, phase):
        if training.worker() == _VICTIM and (step, phase) == (5, 'updated'):
            training.die()

    state, model, facts = training.train(hook)
    training.report(facts)
    assert training.worker() != _VICTIM
    # Worker 0 and 1 are ranks 0 and 1 of a job of two, one generation on.
    assert (hvd.rank(), hvd.size()) == (training.worker(), 2)
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    assert facts['resets'] == 1 and facts['recovery_s'] is not None
    training.check_result(state, model)
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
