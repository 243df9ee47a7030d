"""Horovod's ``groups``/``num_groups`` for DistributedGradientTape and Keras'
DistributedOptimizer, and the optimizer's local gradient aggregation
(``backward_passes_per_step``): the reduced values against closed forms, how many
collectives a step makes (one per group), eagerly and inside tf.function, on a process set,
and the argument errors Horovod raises."""

import copy
import warnings

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow.keras as hvd
from collective.common import connection


def _calls_made(make_calls):
    """How many unnamed collective calls ``make_calls`` made on the global set."""
    counters = connection.current().unnamed_calls
    before = next(copy.copy(counters[0]))
    result = make_calls()
    return next(copy.copy(counters[0])) - before, result


def _mean_of_rank_plus_one():
    return np.mean(np.arange(hvd.size()) + 1.0)


def _variables():
    return [tf.Variable(tf.ones([2])), tf.Variable(tf.ones([3])), tf.Variable(tf.ones([1])),
            tf.Variable(tf.ones([2], tf.float64))]


def _tape_gradients(variables, **options):
    """The tape's gradients of sum over variables of (rank + 1) * (i + 1) * sum(v_i)."""
    rank = hvd.rank()
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.cast(tf.reduce_sum(v), tf.float32) * (rank + 1) * (i + 1)
                         for i, v in enumerate(variables)])
    return hvd.DistributedGradientTape(tape, **options).gradient(loss, variables)


@pytest.mark.parametrize('options, calls', [
    ({}, 4),
    # One grouped allreduce per group whatever its dtypes, as Horovod's (v3 is float64).
    ({'groups': 2}, 2),  # [v0, v1] and [v2, v3]
    ({'groups': 1}, 1),  # everything
    ({'groups': 'lists'}, 3),  # [[v2, v0]] then v1 and v3 alone
])
def test_tape_groups_reduce_the_same_values_in_fewer_calls(options, calls):
    variables = _variables()
    if options.get('groups') == 'lists':
        options = {'groups': [[variables[2], variables[0]]]}
    made, gradients = _calls_made(lambda: _tape_gradients(variables, **options))
    assert made == calls
    for i, (gradient, variable) in enumerate(zip(gradients, variables)):
        assert gradient.dtype == variable.dtype
        np.testing.assert_allclose(gradient.numpy(),
                                   np.full(variable.shape, (i + 1) * _mean_of_rank_plus_one()))


def test_tape_groups_inside_tf_function_with_a_missing_gradient():
    variables = _variables()
    unused = tf.Variable(tf.ones([2]))

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.cast(tf.reduce_sum(v), tf.float32) * (hvd.rank() + 1)
                             for v in variables])
        tape = hvd.DistributedGradientTape(tape, groups=[[unused, variables[1]]], op=hvd.Sum)
        return tape.gradient(loss, {'used': variables, 'unused': unused})

    result = gradients()
    assert result['unused'] is None
    total = np.sum(np.arange(hvd.size()) + 1.0)
    for gradient, variable in zip(result['used'], variables):
        np.testing.assert_allclose(gradient.numpy(), np.full(variable.shape, total))


def test_tape_groups_on_a_process_set(evens):
    rank = hvd.rank()
    members = evens.ranks
    if rank in members:
        variables = _variables()[:2]
        gradients = _tape_gradients(variables, groups=1, process_set=evens)
        mean = np.mean(np.array(members) + 1.0)
        for i, (gradient, variable) in enumerate(zip(gradients, variables)):
            np.testing.assert_allclose(gradient.numpy(), np.full(variable.shape,
                                                                  (i + 1) * mean))


def test_num_groups_is_deprecated_and_bad_groups_are_refused_as_in_horovod():
    with tf.GradientTape() as tape:
        pass
    with pytest.warns(DeprecationWarning, match='`num_groups` has been replaced by `groups`'):
        hvd.DistributedGradientTape(tape, num_groups=2)
    for bad in (-1, 0):
        with pytest.raises(ValueError, match='groups should be a non-negative integer or a '
                                             'list of list of tf.Variable.'):
            hvd.DistributedGradientTape(tape, groups=bad)
        with pytest.raises(ValueError, match='groups should be a non-negative integer'):
            hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), groups=bad)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), groups=2)


def _rank_gradients(step):
    """Rank r's gradient at step s: (r + 1) * (s + 1) on both elements."""
    return tf.fill([2], float((hvd.rank() + 1) * (step + 1)))


@pytest.mark.parametrize('traced', [False, True])
@pytest.mark.parametrize('average', [False, True])
def test_optimizer_aggregates_backward_passes_locally(traced, average):
    passes = 3
    variable = tf.Variable(tf.zeros([2]))
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0),
                                         backward_passes_per_step=passes,
                                         average_aggregated_gradients=average)

    def step(gradient):
        # As minimize and model.fit do: the gradients reduced where they are computed, then
        # applied (Horovod 0.28's split).
        reduced = optimizer._compute_gradients(  # noqa: SLF001
            lambda: tf.reduce_sum(variable * gradient), [variable])
        return optimizer.apply_gradients(reduced)

    if traced:
        step = tf.function(step)
    mean = _mean_of_rank_plus_one()
    expected = np.zeros(2)
    for s in range(2 * passes):
        made, _ = _calls_made(lambda: step(_rank_gradients(s)))
        # Every pass counts an iteration; only every passes-th one communicates and applies.
        assert int(optimizer.iterations) == s + 1
        assert int(optimizer._agg_helper.counter) == (s + 1) % passes  # noqa: SLF001
        if (s + 1) % passes == 0:
            accumulated = sum(mean * (t + 1) for t in range(s + 1 - passes, s + 1))
            expected -= accumulated / (passes if average else 1)
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)
        if not traced:
            assert made == (1 if (s + 1) % passes == 0 else 0)


def test_optimizer_aggregation_with_groups_and_sparse_gradients():
    size = hvd.size()
    table = tf.Variable(tf.zeros([size, 2]))
    bias = tf.Variable(tf.zeros([2]))

    def loss():
        return tf.reduce_sum(tf.gather(table, [hvd.rank()]) * (hvd.rank() + 1)) + \
            tf.reduce_sum(bias)

    dense = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), backward_passes_per_step=2,
                                     sparse_as_dense=True, groups=1)
    for _ in range(2):
        made, _ = _calls_made(lambda: dense.minimize(loss, [table, bias]))
    assert made == 1  # one grouped allreduce of both sums
    expected = np.zeros([size, 2])
    for r in range(size):
        expected[r] = -2 * (r + 1) / size
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(bias.numpy(), [-2.0, -2.0])
    sparse = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), backward_passes_per_step=2)
    with pytest.raises(ValueError, match='IndexedSlices are not supported when '
                                         '`backward_passes_per_step` > 1'):
        sparse.minimize(loss, [table, bias])


def test_model_fit_with_aggregation_and_groups():
    # Two batches an epoch, applied together: plain SGD on their summed averaged gradient.
    size, rank = hvd.size(), hvd.rank()

    def shard(r):
        generator = np.random.default_rng(r)
        x = generator.normal(size=(8, 3)).astype(np.float32)
        return x, (x @ np.array([1.0, -2.0, 3.0], np.float32) + r)[:, None]

    weights = np.zeros((3, 1))
    for _ in range(2):  # epochs
        gradient = np.zeros((3, 1))
        for batch in (slice(0, 4), slice(4, 8)):
            gradient += np.mean([2 / 4 * x[batch].T @ (x[batch] @ weights - y[batch])
                                 for x, y in (shard(r) for r in range(size))], axis=0)
        weights = weights - 0.05 * gradient
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)),
                                 tf.keras.layers.Dense(1, use_bias=False,
                                                       kernel_initializer='zeros')])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05),
                                                     backward_passes_per_step=2, groups=1),
                  loss='mse')
    x, y = shard(rank)
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(model.get_weights()[0], weights, rtol=1e-4, atol=1e-6)
    assert int(model.optimizer.iterations) == 4
