"""A collective that fails on every rank without a death (tensors of different shapes under one
name): every worker rolls back to its last commit and asks the launcher to re-form; the launcher
publishes the next generation with the same workers, as Horovod's driver does once every worker
reported ready, and the run finishes with every sample processed once per epoch and the same
weights, equal to one process's. Run as ``collectiverun --elastic -np 3``."""

import os

import pytest
import torch

import collective.torch as hvd
import elastic_training as training


def test_every_worker_reforms_after_a_failed_collective():
    def hook(state, step, phase):
        # Once, in generation 0, after the weights changed: they must roll back.
        if (step, phase) == (5, 'updated') and os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '0':
            shape = 3 if training.worker() == 1 else 2
            with pytest.raises(hvd.HorovodInternalError, match='shape'):
                hvd.allreduce(torch.zeros(shape), name='mismatched')
            raise hvd.HorovodInternalError('the mismatched allreduce failed, as it must')

    state, model, facts = training.train(hook)
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    # The same workers, in the same ranks.
    assert (hvd.rank(), hvd.size()) == (training.worker(), 3)
    assert facts['resets'] == 1
    training.check_result(state, model)
