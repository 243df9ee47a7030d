"""Errors of collective.tensorflow's ops that every rank sees as a tf.errors exception with the
daemon's message, after which the job goes on: dtypes that differ across ranks, a name
submitted twice while the first is outstanding. (A rank that dies and a tensor that stalls end
a job: tests/tensorflow/failure_check.py runs them in jobs of their own.)"""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd
from collective.tensorflow import mpi_ops


def test_mismatched_dtypes_fail_on_every_rank():
    dtype = tf.float32 if hvd.rank() == 0 else tf.float64
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="Mismatched data types for 'allreduce.errors.dtype': rank 0 sent "
                             "float32, rank 1 sent float64"):
        hvd.allreduce(tf.ones([3], dtype=dtype), name='errors.dtype')
    # The job goes on.
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum, name='errors.dtype.after').numpy().tolist() \
        == [hvd.size()] * 2


def test_a_name_outstanding_twice_is_refused_and_the_first_completes():
    @tf.function
    def twice(x):
        # Two ops of one name in one step: TensorFlow runs them concurrently.
        first = mpi_ops._allreduce(x, name='errors.twice', op=hvd.Sum)  # noqa: SLF001
        second = mpi_ops._allreduce(x * 2, name='errors.twice', op=hvd.Sum)  # noqa: SLF001
        return first, second

    with pytest.raises(tf.errors.AlreadyExistsError,
                       match="tensor 'allreduce.errors.twice' is already outstanding on this rank"):
        twice(tf.ones([4]))
    # Whichever of the two went first completed on every rank: the job goes on.
    np.testing.assert_array_equal(
        hvd.allreduce(tf.ones([1]), op=hvd.Sum, name='errors.twice.after').numpy(),
        [hvd.size()])
