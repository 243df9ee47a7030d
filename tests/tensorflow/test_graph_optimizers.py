"""Horovod's two other paths of a tf.compat.v1 DistributedOptimizer in a graph run by a
session: local gradient aggregation (backward_passes_per_step > 1) and Adasum
(op=hvd.Adasum, Horovod's _DistributedAdasumOptimizer), against values worked out by hand."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd

_POWER_OF_TWO = hvd.size() & (hvd.size() - 1) == 0


def _rank_factor():
    return float(hvd.rank() + 1)


def _mean_rank_factor():
    return (hvd.size() + 1) / 2.0


@pytest.mark.parametrize('average', [False, True])
def test_gradients_of_several_passes_are_summed_then_averaged_over_ranks(average):
    # loss = sum(w * x) with x = (rank + 1) * pass fed per run: the pass's gradient is x.
    passes = 3
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        w = tf.compat.v1.get_variable('w', initializer=np.ones(2, np.float32))
        step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = hvd.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.5), backward_passes_per_step=passes,
            average_aggregated_gradients=average)
        train = optimizer.minimize(tf.reduce_sum(w * x), global_step=step)
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(),
                         tf.compat.v1.local_variables_initializer()])
            expected = 1.0
            for cycle in range(2):
                for k in range(1, passes + 1):
                    session.run(train, feed_dict={x: _rank_factor() * k})
                    if k < passes:  # not applied: the weights wait for the reduction
                        np.testing.assert_allclose(session.run(w), np.full(2, expected))
                    assert session.run(step) == cycle * passes + k
                # The sum over passes 1..3 of the ranks' mean gradient, once per cycle: the
                # second cycle proves the sums were cleared.
                total = _mean_rank_factor() * (1 + 2 + 3)
                expected -= 0.5 * (total / passes if average else total)
                np.testing.assert_allclose(session.run(w), np.full(2, expected), rtol=1e-6)


def test_aggregation_keeps_the_wrapped_optimizers_slots_and_local_variables():
    # Momentum's accumulator is created although the update runs in a branch of the graph;
    # the local variable keeps its own (summed, scaled) gradient.
    with tf.Graph().as_default():
        shared = tf.compat.v1.get_variable('shared', initializer=np.zeros(2, np.float32))
        local = tf.compat.v1.get_variable('local', initializer=np.zeros(2, np.float32))
        loss = tf.reduce_sum((shared + local) * _rank_factor())
        optimizer = hvd.DistributedOptimizer(
            tf.compat.v1.train.MomentumOptimizer(1.0, momentum=0.5), op=hvd.Sum,
            backward_passes_per_step=2)
        optimizer.register_local_var(local)
        train = optimizer.minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(),
                         tf.compat.v1.local_variables_initializer()])
            for _ in range(4):
                session.run(train)
            # Each application's gradient g (two passes summed): accumulators 1·g then 1.5·g,
            # so the weights move by -2.5·g after two applications.
            summed = 2 * hvd.size() * (hvd.size() + 1) / 2.0
            np.testing.assert_allclose(session.run(shared), np.full(2, -2.5 * summed))
            own = 2 * _rank_factor() / hvd.size()  # scale_local_gradients divides by the size
            np.testing.assert_allclose(session.run(local), np.full(2, -2.5 * own), rtol=1e-6)
            assert optimizer.get_slot_names() == ['momentum']


def test_sparse_gradients_need_sparse_as_dense_to_be_aggregated():
    with tf.Graph().as_default():
        table = tf.compat.v1.get_variable('table', initializer=np.ones((4, 2), np.float32))
        loss = tf.reduce_sum(tf.gather(table, [1, 3]))
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                             backward_passes_per_step=2)
        with pytest.raises(ValueError, match='IndexedSlices are not supported when '
                                             '`backward_passes_per_step` > 1'):
            optimizer.minimize(loss)
        dense = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                         backward_passes_per_step=2, sparse_as_dense=True)
        train = dense.minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(),
                         tf.compat.v1.local_variables_initializer()])
            session.run([train])
            session.run([train])
            np.testing.assert_allclose(session.run(table)[:, 0], [1.0, -1.0, 1.0, -1.0])


def _one_hot(index, size):
    values = np.zeros(size, np.float32)
    values[index] = 1.0
    return values


@pytest.mark.skipif(not _POWER_OF_TWO, reason='Adasum needs a power-of-two number of ranks')
@pytest.mark.parametrize('passes', [1, 2])
def test_adasum_combines_the_workers_weight_updates(passes):
    # Each rank's gradient is its own unit vector: the updates are orthogonal, so their
    # Adasum is their sum. The weights start from rank 0's (broadcast), as after
    # BroadcastGlobalVariablesHook.
    size = hvd.size()
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable('w', initializer=np.full(size, hvd.rank(), np.float32))
        loss = tf.reduce_sum(w * _one_hot(hvd.rank(), size))
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                             op=hvd.Adasum, backward_passes_per_step=passes)
        assert optimizer.get_name() == 'DistributedDeltaGradientDescentOptimizer'
        train = optimizer.minimize(loss)
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(bcast)
            for step in range(1, 2 * passes + 1):
                session.run(train)
                # Every rank's updates up to the last combination, on every rank, then this
                # rank's own since.
                local = step % passes
                expected = (np.full(size, -0.5 * (step - local), np.float32)
                            - 0.5 * local * _one_hot(hvd.rank(), size))
                np.testing.assert_allclose(session.run(w), expected, atol=1e-6)
            np.testing.assert_allclose(session.run(optimizer.get_slot(w, 'delta_start')),
                                       np.full(size, -0.5 * 2 * passes), atol=1e-6)
            assert optimizer.get_slot_names() == ['delta_start']


@pytest.mark.skipif(not _POWER_OF_TWO, reason='Adasum needs a power-of-two number of ranks')
def test_adasum_of_equal_updates_is_one_update():
    # Parallel updates (every rank's gradient the same): Adasum keeps one of them, where a
    # sum would take size of them.
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable('w', initializer=np.ones(3, np.float32))
        loss = tf.reduce_sum(w * np.float32(2.0))
        train = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.25),
                                         op=hvd.Adasum).minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            np.testing.assert_allclose(session.run(w), np.full(3, 0.5), atol=1e-6)


@pytest.mark.skipif(_POWER_OF_TWO, reason='refused only for a number of ranks not a power of 2')
def test_adasum_refuses_a_number_of_ranks_not_a_power_of_two():
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable('w', initializer=np.ones(3, np.float32))
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                             op=hvd.Adasum)
        with pytest.raises(NotImplementedError,
                           match='Running Adasum with non-power of 2 ranks is not supported yet'):
            optimizer.minimize(tf.reduce_sum(w))


def test_aggregation_refuses_another_variable_list_with_a_reason():
    # The local sums belong to the variables of the first pass: a pass over another list
    # says so instead of adding to the wrong sums.
    first, second = tf.Variable([1.0]), tf.Variable([2.0])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), backward_passes_per_step=2)
    optimizer.minimize(lambda: tf.reduce_sum(first), [first])
    with pytest.raises(ValueError, match='this optimizer sums 1 gradients, and was given 2'):
        optimizer.minimize(lambda: tf.reduce_sum(first + second), [first, second])
