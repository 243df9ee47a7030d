"""collective.tensorflow where Horovod 0.28.1's suites and users' scripts found it apart from
Horovod (issue 48): grouped ops of several dtypes and their gradients, Horovod's util
helpers, ``get_local_and_global_gradients``, the refusals for ``tf.IndexedSlices``,
``grouped_allreduce``'s ``name``/``ignore_name_scope``, and graph ops named after their
inputs, so that a rank that traces a function again still pairs its ops with the others'."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def _sum_of_ranks_plus_one():
    return hvd.size() * (hvd.size() + 1) / 2


def test_grouped_allreduce_takes_tensors_of_several_dtypes():
    mine = hvd.rank() + 1
    tensors = [tf.fill([3], tf.constant(mine, tf.float32)),
               tf.fill([2, 2], tf.constant(mine, tf.float64)),
               tf.fill([1], tf.constant(mine, tf.int32))]

    @tf.function
    def traced(a, b, c):
        return hvd.grouped_allreduce([a, b, c], op=hvd.Sum)

    for results in (hvd.grouped_allreduce(tensors, op=hvd.Sum), traced(*tensors)):
        assert [r.dtype for r in results] == [tf.float32, tf.float64, tf.int32]
        for result, tensor in zip(results, tensors):
            assert result.shape == tensor.shape
            np.testing.assert_array_equal(result.numpy(), _sum_of_ranks_plus_one())


def test_grouped_allgather_and_reducescatter_take_tensors_of_several_dtypes():
    size, rank = hvd.size(), hvd.rank()
    gathered = hvd.grouped_allgather([tf.fill([rank + 1], tf.constant(rank, tf.float32)),
                                      tf.fill([1, 2], tf.constant(rank, tf.int64))])
    assert [g.dtype for g in gathered] == [tf.float32, tf.int64]
    np.testing.assert_array_equal(gathered[0].numpy(),
                                  np.concatenate([np.full(r + 1, r) for r in range(size)]))
    np.testing.assert_array_equal(gathered[1].numpy(), np.repeat(np.arange(size), 2).reshape(-1, 2))
    scattered = hvd.grouped_reducescatter([tf.ones([size, 2], tf.float32),
                                           tf.ones([size], tf.float64)], op=hvd.Sum)
    assert [s.dtype for s in scattered] == [tf.float32, tf.float64]
    np.testing.assert_array_equal(scattered[0].numpy(), np.full([1, 2], size))
    np.testing.assert_array_equal(scattered[1].numpy(), np.full([1], size))


def test_grouped_allgather_gradient_of_a_float32_gradient_beside_float64_zeros():
    # Horovod's test_horovod_grouped_allgather_grad_cpu: the float32 gradient of one float64
    # output, TensorFlow's float64 zeros for the others, in one grouped gradient.
    size, rank = hvd.size(), hvd.rank()
    rows = [3, 2, 7, 4][:size] + [1] * max(0, size - 4)
    with tf.GradientTape(persistent=True) as tape:
        sources = [tf.Variable(tf.ones([rows[rank], 2]) * rank) for _ in range(3)]
        tensors = [tf.cast(s, tf.float64) for s in sources]
        gathered = hvd.grouped_allgather(tensors)
        upstream = tf.concat([tf.ones([rows[r], 2]) * r for r in range(size)], axis=0)
    for output, tensor in zip(gathered, tensors):
        grad = tape.gradient(output, tensor, upstream)
        np.testing.assert_array_equal(grad.numpy(), np.full([rows[rank], 2], rank))


def test_grouped_allreduce_gradient_of_several_dtypes():
    a = tf.Variable([1.0, 2.0], dtype=tf.float32)
    b = tf.Variable([3.0], dtype=tf.float64)
    with tf.GradientTape() as tape:
        ra, rb = hvd.grouped_allreduce([a * 2, b * 3], op=hvd.Sum)
        loss = tf.reduce_sum(ra) + tf.cast(tf.reduce_sum(rb), tf.float32)
    grad_a, grad_b = tape.gradient(loss, [a, b])
    np.testing.assert_allclose(grad_a.numpy(), [2.0 * hvd.size()] * 2)
    np.testing.assert_allclose(grad_b.numpy(), [3.0 * hvd.size()])


def test_executing_eagerly_and_the_util_helpers_are_horovods():
    assert hvd._executing_eagerly() and hvd.util._executing_eagerly()
    assert hvd._executing_eagerly is hvd.util._executing_eagerly
    assert not tf.function(lambda: tf.constant(hvd.util._executing_eagerly()))()
    variables = [tf.Variable(1.0), [tf.Variable(2.0)]]
    refs = hvd.vars_to_refs(variables)
    assert isinstance(refs, tuple) and hash(refs) is not None
    back = hvd.refs_to_vars(refs)
    assert back[0] is variables[0] and back[1][0] is variables[1][0]
    calls = []
    cached = hvd._cache(lambda x: calls.append(x) or len(calls))
    assert (cached(5), cached(5), cached(6)) == (1, 1, 2)
    assert hvd._make_subgraph(lambda: tf.constant(1)).__class__.__name__ == 'Function'


def test_get_local_and_global_gradients():
    shared = tf.Variable([1.0, 1.0])
    local = tf.Variable([1.0])
    mine = float(hvd.rank() + 1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared * mine) + tf.reduce_sum(local * mine)
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(local)
    local_pairs, global_pairs = tape.get_local_and_global_gradients(loss, [shared, local])
    assert [s is local for s, _ in local_pairs] == [True]
    assert [s is shared for s, _ in global_pairs] == [True]
    # The local gradient is divided by the set's size (scale_local_gradients), as Horovod's.
    np.testing.assert_allclose(local_pairs[0][1].numpy(), [mine / hvd.size()])
    np.testing.assert_allclose(global_pairs[0][1].numpy(),
                               [_sum_of_ranks_plus_one() / hvd.size()] * 2)


def _slices():
    return tf.IndexedSlices(tf.ones([1, 2]), tf.constant([hvd.rank()], tf.int64),
                            dense_shape=tf.constant([hvd.size(), 2], tf.int64))


@pytest.mark.parametrize('factors', [{'prescale_factor': 2.0}, {'postscale_factor': 0.5}])
def test_indexed_slices_with_scale_factors_raise_not_implemented(factors):
    with pytest.raises(NotImplementedError,
                       match='Pre/postscale_factor are not supported with tf.IndexedSlices'):
        hvd.allreduce(_slices(), **factors)
    with pytest.raises(NotImplementedError,
                       match='Pre/postscale_factor are not supported with tf.IndexedSlices'):
        hvd.grouped_allreduce([_slices(), tf.ones([2])], **factors)
    # Horovod raises after the slices' allgathers, made on every rank alike: the job goes on.
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(),
                                  [hvd.size()] * 2)


def test_indexed_slices_refuse_other_ops_with_horovods_messages():
    with pytest.raises(NotImplementedError,
                       match='Only Sum and Average ops are supported with tf.IndexedSlices'):
        hvd.allreduce(_slices(), op=hvd.Max)
    with pytest.raises(NotImplementedError, match='The Adasum reduction does not currently '
                                                  'support sparse tensors'):
        hvd.grouped_allreduce([_slices()], op=hvd.Adasum)


def test_grouped_allreduce_of_indexed_slices_gathers_them_as_groups():
    results = hvd.grouped_allreduce([_slices(), _slices()], op=hvd.Sum)
    for result in results:
        assert isinstance(result, tf.IndexedSlices)
        np.testing.assert_array_equal(tf.convert_to_tensor(result).numpy(),
                                      np.ones([hvd.size(), 2]))


def _collective_ops(concrete):
    return [op for op in concrete.graph.get_operations() if op.type.startswith('Collective')]


def test_grouped_allreduce_takes_name_and_ignore_name_scope():
    ones = tf.ones([2])
    # Horovod's positional order: ..., process_set, ignore_name_scope, name.
    results = hvd.grouped_allreduce([ones], None, '', '', hvd.Compression.none, hvd.Sum, 1.0,
                                    1.0, hvd.global_process_set, False, 'positional')
    np.testing.assert_array_equal(results[0].numpy(), [hvd.size()] * 2)

    @tf.function
    def scoped(x):
        # A scope of each rank's own: only ignore_name_scope lets the ranks pair the op.
        with tf.name_scope(f'rank{hvd.rank()}'):
            return hvd.grouped_allreduce([x], op=hvd.Sum, name='grouped',
                                         ignore_name_scope=True)

    concrete = scoped.get_concrete_function(tf.TensorSpec([2], tf.float32))
    (op,) = _collective_ops(concrete)
    assert op.name == f'rank{hvd.rank()}/grouped' and op.get_attr('ignore_name_scope')
    np.testing.assert_array_equal(scoped(ones)[0].numpy(), [hvd.size()] * 2)


def test_graph_ops_are_named_after_their_inputs_as_horovods():
    @tf.function
    def step(x):
        return (hvd.allreduce(x), hvd.allgather(x), hvd.broadcast(x, 0),
                hvd.grouped_allreduce([x, x]))

    concrete = step.get_concrete_function(tf.TensorSpec([2], tf.float32, name='x'))
    names = sorted(op.name for op in _collective_ops(concrete))
    assert names == ['HorovodAllgather_x_0', 'HorovodAllreduce_x_0', 'HorovodBroadcast_x_0',
                     'HorovodGroupedAllreduce_x_0_x_0']
    # The kernel takes the node's name: no name is fixed when the function is traced.
    assert {op.get_attr('tensor_name') for op in _collective_ops(concrete)} == {b''}


def test_a_rank_that_traces_again_still_pairs_its_ops():
    @tf.function
    def step(x):
        return hvd.allreduce(x * 2.0, op=hvd.Sum), hvd.allgather(x)

    if hvd.rank() == 0:
        # Only rank 0 traces for another signature (say, a partial last batch) first.
        step.get_concrete_function(tf.TensorSpec([3], tf.float32))
    # What names the daemon's tensors: the node's name, or the tensor_name fixed at the trace.
    names = sorted((op.name, op.get_attr('tensor_name')) for op in _collective_ops(
        step.get_concrete_function(tf.TensorSpec([2], tf.float32))))
    assert hvd.allgather_object(names) == [names] * hvd.size()
    reduced, gathered = step(tf.fill([2], float(hvd.rank())))
    np.testing.assert_array_equal(reduced.numpy(), [hvd.size() * (hvd.size() - 1)] * 2)
    np.testing.assert_array_equal(gathered.numpy(), np.repeat(np.arange(hvd.size()), 2))


def test_captured_eager_tensors_pair_up_though_ranks_made_different_numbers_of_ops():
    captured = tf.fill([3], float(hvd.rank() + 1))
    if hvd.rank() == 0:
        # TensorFlow names a captured eager tensor's placeholder with a process-wide number:
        # rank 0 draws a few more than the others.
        for _ in range(3):
            tf.function(lambda: captured * 2.0).get_concrete_function()

    @tf.function
    def step():
        return hvd.allreduce(captured, op=hvd.Sum), hvd.grouped_allreduce([captured, captured])

    names = sorted(op.name for op in _collective_ops(step.get_concrete_function()))
    assert names == ['HorovodAllreduce_captured', 'HorovodGroupedAllreduce_captured_captured']
    assert hvd.allgather_object(names) == [names] * hvd.size()
    summed, averaged = step()
    np.testing.assert_array_equal(summed.numpy(), [_sum_of_ranks_plus_one()] * 3)
    np.testing.assert_array_equal(averaged[1].numpy(), [(hvd.size() + 1) / 2] * 3)


def test_tape_use_generic_names_names_reductions_grad_i_without_scopes():
    variables = [tf.Variable([1.0]), tf.Variable([2.0, 3.0])]

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(variables[0]) + tf.reduce_sum(variables[1] * 2.0)
        tape = hvd.DistributedGradientTape(tape)
        return tape.gradient(loss, variables, use_generic_names=True)

    ops = _collective_ops(gradients.get_concrete_function())
    assert sorted(op.name for op in ops) == ['DistributedGradientTape_Allreduce/grad_0',
                                             'DistributedGradientTape_Allreduce/grad_1']
    assert all(op.get_attr('ignore_name_scope') for op in ops)
    grad_a, grad_b = gradients()
    np.testing.assert_allclose(grad_a.numpy(), [1.0])
    np.testing.assert_allclose(grad_b.numpy(), [2.0, 2.0])


def test_split_list_takes_horovods_parameter_names():
    assert hvd.split_list(l=[1, 2, 3, 4, 5], n=2) == [[1, 2, 3], [4, 5]]
