"""A worker that dies after its job failed but before it registered with the next generation:
the others, already registered with that generation and waiting for it to form, give it up as
soon as the launcher publishes the one without the dead worker, and go on. Run as
``collectiverun --elastic --min-np 2 -np 4`` with a daemon whose registration deadline is
longer than the test's timeout: waiting for that deadline fails the test."""

import os

import collective.torch as hvd
import elastic_training as training
from collective.common import elastic_rendezvous

# Worker 3 dies in step 5 once the others updated their weights; worker 2,
# rolling back with the others, dies as it is about to join generation 1.
_FIRST_VICTIM = 3
_SECOND_VICTIM = 2


def test_a_generation_that_a_death_superseded_is_given_up(monkeypatch):
    if training.worker() == _SECOND_VICTIM:
        point_environment_at = elastic_rendezvous.point_environment_at

        def die_joining_generation_1(world):
            if world.generation == 1:
                os.kill(os.getpid(), 9)
            point_environment_at(world)

        monkeypatch.setattr(elastic_rendezvous, 'point_environment_at', die_joining_generation_1)

    def hook(state, step, phase):
        if training.worker() == _FIRST_VICTIM and (step, phase) == (5, 'updated'):
            training.die()

    state, model, facts = training.train(hook)
    assert training.worker() in (0, 1)
    # Generation 1 [0, 1, 2] never formed; generation 2 is [0, 1].
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '2'
    assert (hvd.rank(), hvd.size()) == (training.worker(), 2)
    assert facts['resets'] == 1
    training.check_result(state, model)
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
