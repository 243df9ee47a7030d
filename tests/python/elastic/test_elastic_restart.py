"""A failed worker replaced (``collectiverun --elastic -np 2 --restart-failed 1``): the survivor
rolls back, the replacement joins the re-formed job as rank 1 and receives the state, and the
run ends as if nothing had happened."""

import os

import collective.torch as hvd
import elastic_training as training


def test_replacement_receives_the_state():
    def hook(state, step, phase):
        if training.worker() == 1 and (step, phase) == (6, 'start'):
            training.die()

    state, model, facts = training.train(hook)
    training.report(facts)
    assert (hvd.size(), os.environ['COLLECTIVE_ELASTIC_GENERATION']) == (2, '1')
    assert training.worker() in (0, 2)
    assert hvd.rank() == (0 if training.worker() == 0 else 1)
    if training.worker() == 2:
        assert facts['first_step'] > 0
    training.check_result(state, model)
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
