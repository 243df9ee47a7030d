"""A worker fails on one of two stand-in hosts, with horovodrun's command line
(``collectiverun --elastic -np 2 --min-np 2 -H localhost:2,127.0.0.1:2``; the job starts on
all 4 slots, as Horovod's fixed hosts do). As Horovod's driver,
collectiverun blacklists the failed worker's host: its other worker is stopped, and the two
workers of 127.0.0.1 roll back to their last commit and finish the training alone, with every
sample processed once per epoch and one process's weights (Horovod's
test_fault_tolerance_without_scaling, in our training run)."""

import os
import time

import collective.torch as hvd
import elastic_training as training

# Worker 0 fails in step 5 of 16 (mid-epoch), once the others have updated
# their weights; worker 1 shares its host.
_FAILS = 0


def test_a_failed_workers_host_is_blacklisted_and_the_others_finish():
    started = {}

    def hook(state, step, phase):
        started.setdefault('size', hvd.size())
        if training.worker() == _FAILS and (step, phase) == (5, 'updated'):
            with open(training.death_file(), 'w') as f:
                f.write(repr(time.time()))
            os._exit(3)  # a failure, not a signal: the host is blacklisted

    state, model, facts = training.train(hook)
    training.report(facts)
    assert started['size'] == 4, 'a worker on every slot -H lists'
    assert training.worker() in (2, 3), 'localhost is blacklisted: worker 1 stopped with it'
    assert (hvd.rank(), hvd.size()) == (training.worker() - 2, 2)
    assert (hvd.cross_size(), hvd.local_size()) == (1, 2)
    assert os.environ['COLLECTIVE_ELASTIC_HOST'] == '127.0.0.1'
    assert facts['resets'] >= 1
    training.check_result(state, model)
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
