"""Horovod's TF1-style API in collective.tensorflow: the top-level DistributedOptimizer (a
tf.compat.v1 optimizer in a graph run by a session, and a Keras optimizer handed on),
broadcast_global_variables and BroadcastGlobalVariablesHook (MonitoredTrainingSession), and
what Horovod refuses, as it refuses it."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd
import collective.tensorflow.keras as hvd_keras


def _rank_values(rank):
    return np.arange(6, dtype=np.float32).reshape(2, 3) * (rank + 1) + rank


def test_broadcast_global_variables_in_a_graph_takes_the_roots_values():
    root = hvd.size() - 1
    with tf.Graph().as_default():
        weights = tf.compat.v1.get_variable('weights', initializer=_rank_values(hvd.rank()))
        steps = tf.compat.v1.get_variable('steps', initializer=np.int64(hvd.rank() * 7))
        bcast = hvd.broadcast_global_variables(root)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(bcast)
            np.testing.assert_array_equal(session.run(weights), _rank_values(root))
            assert session.run(steps) == root * 7


def test_broadcast_global_variables_refuses_eager_execution_as_horovod_does():
    with pytest.raises(RuntimeError, match=r'does not support eager execution. Please use '
                                           r'`hvd.broadcast_variables'):
        hvd.broadcast_global_variables(0)
    with pytest.raises(RuntimeError, match='does not support eager execution'):
        hvd_keras.broadcast_global_variables(0)


def test_the_hook_broadcasts_once_the_monitored_session_exists():
    with tf.Graph().as_default():
        weights = tf.compat.v1.get_variable('hooked', initializer=_rank_values(hvd.rank()))
        tf.compat.v1.train.get_or_create_global_step()
        hook = hvd.BroadcastGlobalVariablesHook(0)
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
            np.testing.assert_array_equal(session.run(weights), _rank_values(0))


def test_a_v1_optimizer_applies_the_averaged_gradient():
    # loss = sum(w * x), x = rank + 1: each rank's gradient is x, their average
    # (size + 1) / 2; one step of SGD with rate 0.5 from w = 1.
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable('w', initializer=np.ones(3, dtype=np.float32))
        loss = tf.reduce_sum(w * float(hvd.rank() + 1))
        optimizer = hvd.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.5))
        assert isinstance(optimizer, tf.compat.v1.train.Optimizer)
        assert optimizer.get_name() == 'DistributedGradientDescentOptimizer'
        train = optimizer.minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            expected = 1.0 - 0.5 * (hvd.size() + 1) / 2.0
            np.testing.assert_allclose(session.run(w), np.full(3, expected, np.float32))
            assert optimizer.get_slot_names() == []


def test_a_v1_optimizer_sums_and_keeps_local_variables_own_gradients():
    with tf.Graph().as_default():
        shared = tf.compat.v1.get_variable('shared', initializer=np.zeros(2, np.float32))
        local = tf.compat.v1.get_variable('local', initializer=np.zeros(2, np.float32))
        loss = tf.reduce_sum((shared + local) * float(hvd.rank() + 1))
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                             op=hvd.Sum, scale_local_gradients=False)
        optimizer.register_local_var(local)
        train = optimizer.minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            total = hvd.size() * (hvd.size() + 1) / 2.0
            np.testing.assert_allclose(session.run(shared), np.full(2, -total))
            np.testing.assert_allclose(session.run(local), np.full(2, -(hvd.rank() + 1.0)))


def test_a_keras_optimizer_is_handed_to_the_keras_distributed_optimizer():
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.5))
    assert type(optimizer).__name__ == 'SGD'
    assert hasattr(optimizer, 'register_local_var')
    w = tf.Variable(np.ones(2, dtype=np.float32))
    optimizer.minimize(lambda: tf.reduce_sum(w * (hvd.rank() + 1.0)), [w])
    np.testing.assert_allclose(w.numpy(), np.full(2, 1.0 - 0.5 * (hvd.size() + 1) / 2.0))


def test_what_horovod_refuses_is_refused_at_the_call():
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match='gradient_predivide_factor not supported with op != '
                                         'Average'):
        hvd.DistributedOptimizer(sgd, op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match='Adasum does not support average_aggregated_gradients'):
        hvd.DistributedOptimizer(sgd, op=hvd.Adasum, average_aggregated_gradients=True)
    with pytest.raises(ValueError, match='groups should be a non-negative integer'):
        hvd.DistributedOptimizer(sgd, groups=-1)
    with pytest.raises(ValueError, match='op == Adasum is not supported yet with Keras'):
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(), op=hvd.Adasum)
    with pytest.warns(DeprecationWarning, match='`num_groups` has been replaced by `groups`'):
        hvd.DistributedOptimizer(sgd, num_groups=2)
    # Eagerly (these tests run eagerly) Horovod refuses local aggregation of a v1 optimizer.
    with pytest.raises(ValueError, match='backward_passes_per_step > 1 is not yet supported for '
                                         '_LegacyOptimizer with eager execution'):
        hvd.DistributedOptimizer(sgd, backward_passes_per_step=2)


def test_adasum_of_a_v1_optimizer_refuses_a_process_set_at_the_call(evens):
    with pytest.raises(NotImplementedError, match='Adasum does not support process sets yet'):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=hvd.Adasum,
                                 process_set=evens)


def test_horovods_helpers_are_exported():
    assert hvd.num_rank_is_power_2(4) and not hvd.num_rank_is_power_2(6)
    assert hvd.split_list([1, 2, 3], 2) == [[1, 2], [3]]
    assert hvd.gpu_available('tensorflow') == (
        hvd.cuda_built() and bool(tf.config.list_physical_devices('GPU')))
