"""Shutting down and initialising again, as Horovod's suite does after every test (gloo mode)
and elastic training does: each ``init()`` forms the job anew at once, whether or not the other
ranks have left the previous run yet, and the job works.
"""

import torch

import collective.torch as hvd
import conftest


def test_shutdown_and_init_again_ten_times():
    # Leaving ends the job for the others: wait until every rank is done
    # with the tests before (some use only this rank's static set).
    hvd.barrier()
    for run in range(10):
        hvd.shutdown()
        assert not hvd.is_initialized()
        # The static sets again, as the first init() asked for them: later
        # tests use them.
        hvd.init(process_sets=conftest.STATIC_PROCESS_SETS)
        total = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum,
                              name=f'reinit.{run}')
        size = hvd.size()
        assert total.tolist() == [size * (size + 1) / 2] * 4, f'run {run}'
        hvd.barrier()
    assert hvd.is_initialized()
