"""collective.tensorflow's large allreduce and broadcast outputs live in the arena: the daemon
writes them there (nothing is copied out of the result segment, on one node or across nodes),
with the same bits as the copy path; an op of such a tensor reads it in place; and
such a tensor stays valid after shutdown()."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd
from collective.common import connection

_LARGE = 1 << 15  # elements: 128 KiB of float32, over the 64 KiB threshold


def _copied_out_bytes():
    return connection.current().client.copied_out_bytes


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32,
                                   tf.int64, tf.uint8])
def test_large_allreduce_results_are_written_by_the_daemon(dtype):
    rank, size = hvd.rank(), hvd.size()
    count = (1 << 17) // dtype.size  # 128 KiB whatever the dtype
    x = tf.cast(tf.range(count) % 7 + rank, dtype)
    copied = _copied_out_bytes()
    total = hvd.allreduce(x, op=hvd.Sum, name=f'arena.tf.{dtype.name}')
    assert _copied_out_bytes() == copied  # on one node and across nodes alike
    expected = sum(tf.cast(tf.range(count) % 7 + r, tf.float64) for r in range(size))
    np.testing.assert_array_equal(tf.cast(total, tf.float64).numpy(), expected.numpy())
    # The same bits as the copy path: a small allreduce of a slice, which is copied out.
    head = hvd.allreduce(x[:16], op=hvd.Sum, name=f'arena.tf.small.{dtype.name}')
    np.testing.assert_array_equal(head.numpy(), total[:16].numpy())


def test_grouped_and_broadcast_outputs_and_a_chain():
    rank, size = hvd.rank(), hvd.size()
    a, b = tf.fill([_LARGE], float(rank)), tf.fill([_LARGE], float(rank + 1))
    copied = _copied_out_bytes()
    ga, gb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    root = hvd.broadcast(tf.fill([_LARGE], float(rank)), root_rank=size - 1, name='arena.tf.bcast')
    # An allreduce of a result in the arena: read in place, written in place.
    again = hvd.allreduce(ga, op=hvd.Sum, name='arena.tf.chain')
    assert _copied_out_bytes() == copied  # on one node and across nodes alike
    total = size * (size - 1) / 2
    np.testing.assert_array_equal(ga.numpy(), np.full(_LARGE, total, np.float32))
    np.testing.assert_array_equal(gb.numpy(), np.full(_LARGE, total + size, np.float32))
    np.testing.assert_array_equal(root.numpy(), np.full(_LARGE, size - 1, np.float32))
    np.testing.assert_array_equal(again.numpy(), np.full(_LARGE, total * size, np.float32))


def test_an_arena_output_outlives_shutdown():
    size = hvd.size()
    total = hvd.allreduce(tf.ones([_LARGE]), op=hvd.Sum, name='arena.tf.outlives')
    hvd.shutdown()
    try:
        # The tensor keeps its block and the old arena mapped: TensorFlow still reads it.
        np.testing.assert_array_equal(total.numpy(), np.full(_LARGE, size, np.float32))
        np.testing.assert_array_equal((total * 2).numpy(), np.full(_LARGE, 2 * size, np.float32))
    finally:
        hvd.init()
    # It is not in the new connection's arena: the copy path takes it.
    again = hvd.allreduce(total, op=hvd.Sum, name='arena.tf.after_reinit')
    np.testing.assert_array_equal(again.numpy(), np.full(_LARGE, size * size, np.float32))
