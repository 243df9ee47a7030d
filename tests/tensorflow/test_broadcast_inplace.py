"""collective.tensorflow's broadcast_ (Horovod's in-place broadcast of variables): the variables
take the root's values, eagerly and inside tf.function, on the global set and a process set."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def _variables(rank):
    """Rank r's variables: values that differ by rank, of several dtypes and shapes."""
    return [tf.Variable(np.full((2, 3), rank + 1.5, dtype=np.float32)),
            tf.Variable(np.arange(4, dtype=np.int64) * (rank + 1)),
            tf.Variable(np.float64(rank * 10.0))]


@pytest.mark.parametrize('root', ['first', 'last'])
def test_variables_take_the_roots_values(root):
    root_rank = 0 if root == 'first' else hvd.size() - 1
    variables = _variables(hvd.rank())
    values = hvd.broadcast_(variables, root_rank=root_rank, name=f'inplace.{root}')
    for var, value, want in zip(variables, values, _variables(root_rank)):
        np.testing.assert_array_equal(var.numpy(), want.numpy())
        np.testing.assert_array_equal(value.numpy(), want.numpy())
        assert value.dtype == var.dtype
    # One variable alone is taken too.
    single = tf.Variable([float(hvd.rank())])
    hvd.broadcast_(single, root_rank=root_rank)
    assert single.numpy().tolist() == [float(root_rank)]


def test_inside_a_tf_function():
    variables = _variables(hvd.rank())

    @tf.function
    def step():
        return hvd.broadcast_(variables, root_rank=0, name='inplace.function')

    step()
    for var, want in zip(variables, _variables(0)):
        np.testing.assert_array_equal(var.numpy(), want.numpy())


def test_on_a_process_set(evens):
    if not evens.included():
        return
    last_even = max(evens.ranks)
    variable = tf.Variable([float(hvd.rank())] * 3)
    hvd.broadcast_([variable], root_rank=last_even, process_set=evens, name='inplace.set')
    assert variable.numpy().tolist() == [float(last_even)] * 3
