"""Errors of collective.tensorflow's ops that every rank sees as a tf.errors exception with the
daemon's message, after which the job goes on: dtypes that differ across ranks. (A rank that
dies and a tensor that stalls end a job: tests/tensorflow/failure_check.py runs them in jobs
of their own.)

Not tested here: two ops of one name in one step. Whether the second is refused
(AlreadyExistsError) depends on timing on each rank: once the first has completed, the second
is a new collective that the ranks which refused theirs never submit, and the stall inspector
ends it. Horovod's ops race alike; collective.torch refuses at the call instead, as its names
stay in use until synchronize."""

import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def test_mismatched_dtypes_fail_on_every_rank():
    dtype = tf.float32 if hvd.rank() == 0 else tf.float64
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="Mismatched data types for 'allreduce.errors.dtype': rank 0 sent "
                             "float32, rank 1 sent float64"):
        hvd.allreduce(tf.ones([3], dtype=dtype), name='errors.dtype')
    # The job goes on.
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum, name='errors.dtype.after').numpy().tolist() \
        == [hvd.size()] * 2
