"""collective.tensorflow's large allreduce, broadcast and reducescatter outputs live in the arena: the daemon
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


def _arena_free_bytes():
    return connection.current().client.arena_free_bytes


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


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64, tf.int32])
def test_large_reducescatter_outputs_are_written_by_the_daemon(dtype):
    # Each rank's rows are known before the run: its output is allocated in the arena and
    # the daemon writes them there (single and grouped, on one node and across nodes), with
    # the bits of a reducescatter whose small share is copied out. Uneven: the first
    # rows % size ranks get one row more.
    rank, size = hvd.rank(), hvd.size()
    rows, columns = 2 * size + 1, (1 << 17) // dtype.size  # 128 KiB rows
    x = tf.cast(tf.reshape(tf.range(rows * columns) % 11, [rows, columns]) + rank, dtype)
    first = rank * (rows // size) + min(rank, rows % size)
    count = rows // size + (1 if rank < rows % size else 0)
    free = _arena_free_bytes()
    copied = _copied_out_bytes()
    mine = hvd.reducescatter(x, op=hvd.Sum, name=f'arena.tf.rs.{dtype.name}')
    grouped = hvd.grouped_reducescatter([x, x * 2], op=hvd.Sum)
    assert _copied_out_bytes() == copied
    # The three results hold arena blocks (a result copied from the daemon's view would not).
    assert _arena_free_bytes() <= free - 3 * count * columns * dtype.size
    total = sum(tf.cast(x, tf.float64) - rank + r for r in range(size))[first:first + count]
    np.testing.assert_array_equal(tf.cast(mine, tf.float64).numpy(), total.numpy())
    np.testing.assert_array_equal(tf.cast(grouped[0], tf.float64).numpy(), total.numpy())
    np.testing.assert_array_equal(tf.cast(grouped[1], tf.float64).numpy(), 2 * total.numpy())
    # The same bits as a small result, which is not in the arena: a slice of few columns.
    head = hvd.reducescatter(x[:, :4], op=hvd.Sum, name=f'arena.tf.rs.small.{dtype.name}')
    np.testing.assert_array_equal(head.numpy(), mine[:, :4].numpy())


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
