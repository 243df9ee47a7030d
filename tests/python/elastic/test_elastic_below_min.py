"""A failure leaves fewer workers than ``--min-np``, and the job waits for slots instead of
stopping, as Horovod's driver does. Run as ``collectiverun --elastic -np 4 --min-np 4
-H localhost:2,127.0.0.1:2 --blacklist-cooldown-range 1 1``: worker 3 fails mid-epoch, so
127.0.0.1 is blacklisted for a second and worker 2 stops with it. Workers 0 and 1 roll back
and wait; once the cooldown is over, workers 4 and 5 start on 127.0.0.1 in one generation,
receive the state, and the four finish with every sample processed once per epoch and one
process's weights."""

import os
import time

import collective.torch as hvd
import elastic_training as training

_FAILS = 3


def test_the_job_waits_below_min_np_for_slots_and_goes_on_with_new_workers():
    def hook(state, step, phase):
        if training.worker() == _FAILS and (step, phase) == (5, 'updated'):
            with open(training.death_file(), 'w') as f:
                f.write(repr(time.time()))
            os._exit(3)  # a failure: its host is blacklisted

    state, model, facts = training.train(hook)
    training.report(facts)
    assert training.worker() in (0, 1, 4, 5)
    assert hvd.size() == 4 and hvd.cross_size() == 2
    if training.worker() in (4, 5):
        assert os.environ['COLLECTIVE_ELASTIC_HOST'] == '127.0.0.1'
    else:
        assert facts['resets'] >= 1, 'the survivors rolled back and re-formed'
    training.check_result(state, model)
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
