"""collective.tensorflow's size_op, local_size_op, rank_op, local_rank_op and
process_set_included_op: int32 scalars read when the op runs, eagerly, inside tf.function and in
a TF1 graph, for the global set and a process set."""

import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def _values():
    return [hvd.size_op(), hvd.local_size_op(), hvd.rank_op(), hvd.local_rank_op(),
            hvd.process_set_included_op()]


def _expected():
    # One node: local rank and size are the global ones.
    return [hvd.size(), hvd.local_size(), hvd.rank(), hvd.local_rank(), 1]


def test_eagerly():
    values = _values()
    for value in values:
        assert value.dtype == tf.int32
        assert value.shape == ()
    assert [int(v) for v in values] == _expected()


def test_inside_a_tf_function():
    step = tf.function(_values)
    assert [int(v) for v in step()] == _expected()


def test_in_a_tf1_graph_they_are_not_folded_into_constants():
    with tf.Graph().as_default():
        values = _values()
        for value in values:
            assert value.op.type != 'Const'
            assert value.op.op_def.is_stateful
        with tf.compat.v1.Session() as session:
            assert [int(v) for v in session.run(values)] == _expected()


def test_on_a_process_set(evens):
    included = hvd.process_set_included_op(process_set_id=evens.process_set_id, name='included')
    assert int(included) == (1 if hvd.rank() % 2 == 0 else 0)
    assert int(hvd.size_op(process_set_id=evens.process_set_id)) == len(evens.ranks)


def test_an_unknown_process_set_is_refused():
    with pytest.raises(tf.errors.OpError, match='process set 12345'):
        hvd.size_op(process_set_id=12345)
