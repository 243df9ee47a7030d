"""collective.tensorflow's arena tensors (``to_arena``, ``in_arena``): tensors placed in the
trainer's shared-memory arena hold the same values, collectives read them in place and give
the same results, and what cannot move stays itself."""

import numpy as np
import tensorflow as tf

import collective.tensorflow as hvd


def test_to_arena_places_the_values_in_the_arena():
    ordinary = tf.fill([64, 1024], float(hvd.rank() + 1))
    assert not hvd.in_arena(ordinary)
    moved = hvd.to_arena(ordinary)
    assert hvd.in_arena(moved) and moved.dtype == ordinary.dtype
    np.testing.assert_array_equal(moved.numpy(), ordinary.numpy())
    # Already there: itself.
    assert hvd.in_arena(hvd.to_arena(moved))


def test_collectives_of_arena_tensors_give_the_same_results():
    size = hvd.size()
    tensors = hvd.to_arena([tf.fill([3, 5], float(hvd.rank() + 1)),
                            tf.fill([1000], hvd.rank() + 1),
                            tf.cast(tf.fill([7], hvd.rank()), tf.float64)])
    assert all(hvd.in_arena(t) for t in tensors)

    @tf.function
    def step():
        return hvd.grouped_allreduce(tensors, op=hvd.Sum)

    for reduced in (hvd.grouped_allreduce(tensors, op=hvd.Sum), step()):
        np.testing.assert_array_equal(reduced[0].numpy(), np.full([3, 5], size * (size + 1) / 2))
        np.testing.assert_array_equal(reduced[1].numpy(), np.full([1000], size * (size + 1) // 2))
        np.testing.assert_array_equal(reduced[2].numpy(), np.full([7], size * (size - 1) / 2))
    # The input is read, not written: it keeps its values.
    np.testing.assert_array_equal(tensors[0].numpy(), np.full([3, 5], hvd.rank() + 1.0))
    gathered = hvd.allgather(tensors[2])
    np.testing.assert_array_equal(gathered.numpy(), np.repeat(np.arange(size), 7))


def test_to_arena_inside_a_function_and_what_stays_itself():
    @tf.function
    def moved_and_placed(x):
        moved = hvd.to_arena(x)
        return moved, hvd.in_arena(moved)

    moved, placed = moved_and_placed(tf.ones([256]))
    assert bool(placed)
    np.testing.assert_array_equal(moved.numpy(), np.ones(256))
    # Strings have no flat bytes, an empty tensor nothing to place: both stay themselves.
    words, empty = hvd.to_arena((tf.constant(['a', 'bc']), tf.zeros([0, 3])))
    assert words.numpy().tolist() == [b'a', b'bc'] and empty.shape == (0, 3)
    assert not hvd.in_arena(empty)
    assert hvd.to_arena([]) == []
