"""collective.tensorflow's ops against values computed by hand: each rank contributes tensors
derived from its rank, so every result is known in closed form. Eagerly and inside
tf.function; gradients; an error from the daemon on every rank."""

import os

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def _ranks():
    return np.arange(hvd.size(), dtype=np.float64)


def test_basics():
    assert hvd.is_initialized()
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    # Across stand-in nodes (tests/integration/multinode/tensorflow), the harness says where
    # this rank is; otherwise the job is one node.
    local_size = hvd.local_size()
    local_sizes = [int(n) for n in
                   os.environ.get('COLLECTIVE_TEST_LOCAL_SIZES', str(local_size)).split(',')]
    node = int(os.environ.get('COLLECTIVE_TEST_NODE', '0'))
    assert (hvd.size(), local_size) == (sum(local_sizes), local_sizes[node])
    assert hvd.rank() == sum(local_sizes[:node]) + hvd.local_rank()
    assert (hvd.cross_size(), hvd.cross_rank()) == (len(local_sizes), node)
    assert not hvd.mpi_built() and not hvd.gloo_built()


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16])
def test_allreduce_ops(dtype):
    value = tf.fill([2, 3], tf.cast(hvd.rank() + 1, dtype))
    values = _ranks() + 1
    expected = {hvd.Sum: values.sum(), hvd.Min: values.min(), hvd.Max: values.max(),
                hvd.Product: values.prod()}
    for op, want in expected.items():
        result = hvd.allreduce(value, op=op)
        assert result.dtype == dtype and result.shape == (2, 3)
        np.testing.assert_allclose(result.numpy(), np.full((2, 3), want))
    if dtype.is_floating:
        average = hvd.allreduce(value)
        np.testing.assert_allclose(average.numpy(), np.full((2, 3), values.mean()), rtol=1e-3)


_EVERY_DTYPE = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                tf.bfloat16, tf.float32, tf.float64, tf.bool]


def test_every_dtype_travels_intact():
    size, rank = hvd.size(), hvd.rank()
    # 0 on even ranks, 1 on odd ones: a value every dtype, bool included, holds.
    for dtype in _EVERY_DTYPE:
        mine = tf.cast(tf.fill([2], rank % 2), dtype)
        gathered = hvd.allgather(mine)
        assert gathered.dtype == dtype
        np.testing.assert_array_equal(
            tf.cast(gathered, tf.float64).numpy(), np.repeat(np.arange(size) % 2, 2))
        root = hvd.broadcast(mine, root_rank=1 % size)
        np.testing.assert_array_equal(tf.cast(root, tf.float64).numpy(), [(1 % size) % 2] * 2)
        if dtype != tf.bool:
            largest = hvd.allreduce(mine, op=hvd.Max)
            np.testing.assert_array_equal(tf.cast(largest, tf.float64).numpy(),
                                          [min(size - 1, 1)] * 2)


def test_shape_functions():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def ops(x):
        received, received_splits = hvd.alltoall(x, splits=tf.ones([hvd.size()], tf.int32))
        return hvd.allreduce(x), hvd.allgather(x), hvd.broadcast(x, 0), received, received_splits

    shapes = [output.shape.as_list() for output in ops.get_concrete_function().outputs]
    assert shapes == [[None, 3], [None, 3], [None, 3], [None, 3], [None]]
    with pytest.raises(ValueError, match='rank'):
        tf.function(lambda: hvd.allgather(tf.constant(1.0))).get_concrete_function()


def test_allreduce_scale_factors_and_fp16_compression():
    value = tf.fill([5], float(hvd.rank() + 1))
    result = hvd.allreduce(value, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    np.testing.assert_allclose(result.numpy(), np.full(5, (_ranks() + 1).sum()))
    scalar = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum)
    assert scalar.shape == () and scalar.numpy() == _ranks().sum()
    compressed = hvd.allreduce(value, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert compressed.dtype == tf.float32
    np.testing.assert_allclose(compressed.numpy(), np.full(5, (_ranks() + 1).sum()))


def test_grouped_allreduce_and_its_gradient():
    size, rank = hvd.size(), hvd.rank()
    tensors = [tf.Variable(tf.fill([n], float(rank + n))) for n in (1, 2, 3)]
    with tf.GradientTape() as tape:
        reduced = hvd.grouped_allreduce(tensors, op=hvd.Sum)
        loss = tf.add_n([tf.reduce_sum(r) * (rank + 1) for r in reduced])
    for n, r in zip((1, 2, 3), reduced):
        np.testing.assert_allclose(r.numpy(), np.full(n, (_ranks() + n).sum()))
    # Each member's gradient is the sum over ranks of rank + 1.
    for n, gradient in zip((1, 2, 3), tape.gradient(loss, tensors)):
        np.testing.assert_allclose(gradient.numpy(), np.full(n, (_ranks() + 1).sum()))
    mismatch = [tf.ones([2]), tf.ones([3 + (rank == 0 and size > 1)])]
    if size > 1:
        with pytest.raises(tf.errors.OpError, match='Mismatched'):
            hvd.grouped_allreduce(mismatch)


def _adasum(a, b):
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    return (1 - dot / (2 * aa)) * a + (1 - dot / (2 * bb)) * b


def test_adasum_of_a_power_of_two_ranks_or_refused():
    # Rank r gives (r + 1, r * r + 1, 1): no two ranks' vectors are parallel.
    def vector(r):
        return np.array([r + 1.0, r * r + 1.0, 1.0])

    size = hvd.size()
    if size & (size - 1):
        with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
            hvd.allreduce(tf.constant(vector(hvd.rank())), op=hvd.Adasum)
        with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
            hvd.grouped_allreduce([tf.constant(vector(hvd.rank()))], op=hvd.Adasum)
        return
    # Horovod's tree: neighbours first, then the pairs' results, and so on.
    level = [vector(r) for r in range(size)]
    while len(level) > 1:
        level = [_adasum(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    result = hvd.allreduce(tf.constant(vector(hvd.rank()), dtype=tf.float64), op=hvd.Adasum)
    np.testing.assert_allclose(result.numpy(), level[0], rtol=1e-12)
    # Not the plain sum: Adasum is what ran.
    assert size == 1 or not np.allclose(result.numpy(), sum(vector(r) for r in range(size)))


def test_allgather_of_uneven_rows():
    rank = hvd.rank()
    # Rank r gives r rows: rank 0 none at all.
    tensor = tf.fill([rank, 2], rank)
    gathered = hvd.allgather(tensor)
    expected = np.concatenate([np.full((r, 2), r) for r in range(hvd.size())])
    assert gathered.shape == (hvd.size() * (hvd.size() - 1) // 2, 2)
    np.testing.assert_array_equal(gathered.numpy(), expected)


def test_broadcast_from_last_rank():
    root = hvd.size() - 1
    result = hvd.broadcast(tf.fill([3], float(hvd.rank())), root_rank=root)
    np.testing.assert_array_equal(result.numpy(), np.full(3, float(root)))


def test_alltoall_with_splits():
    size, rank = hvd.size(), hvd.rank()
    # Rank r sends j + 1 rows of value 10 r + j to rank j.
    splits = [j + 1 for j in range(size)]
    rows = np.concatenate([np.full(j + 1, 10 * rank + j) for j in range(size)]).astype(np.int32)
    received, received_splits = hvd.alltoall(tf.constant(rows), splits=splits)
    np.testing.assert_array_equal(received_splits.numpy(), [rank + 1] * size)
    np.testing.assert_array_equal(
        received.numpy(), np.concatenate([np.full(rank + 1, 10 * r + rank) for r in range(size)]))


def test_ops_inside_tf_function():
    size, rank = hvd.size(), hvd.rank()

    @tf.function
    def step(x):
        summed = hvd.allreduce(x, op=hvd.Sum)
        gathered = hvd.allgather(tf.reshape(x[:1], [1]))
        root = hvd.broadcast(x, root_rank=0)
        return summed, gathered, root

    for call in range(2):  # the traced function runs twice under the same names
        x = tf.constant([rank + call, 1.0 + call])
        summed, gathered, root = step(x)
        np.testing.assert_allclose(summed.numpy(), [(_ranks() + call).sum(), size * (1.0 + call)])
        np.testing.assert_allclose(gathered.numpy(), _ranks() + call)
        np.testing.assert_allclose(root.numpy(), [call, 1.0 + call])
        assert summed.shape == (2,)


def test_gradients_of_the_ops():
    size, rank = hvd.size(), hvd.rank()
    x = tf.Variable(tf.fill([2], float(rank + 1)))
    weights = tf.constant([1.0, 2.0]) * (rank + 1)
    with tf.GradientTape(persistent=True) as tape:
        reduced = tf.reduce_sum(hvd.allreduce(x, op=hvd.Sum) * weights)
        gathered = tf.reduce_sum(hvd.allgather(x) * tf.tile(weights, [size]))
    # d/dx of sum(allreduce(x) * w_r) is the sum of every rank's w.
    np.testing.assert_allclose(tape.gradient(reduced, x).numpy(),
                               np.array([1.0, 2.0]) * (_ranks() + 1).sum())
    # Allgather: the average over ranks of the gradient, then this rank's rows.
    np.testing.assert_allclose(tape.gradient(gathered, x).numpy(),
                               np.array([1.0, 2.0]) * (_ranks() + 1).mean())


@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_allreduce_gradient_agrees_with_tf_test_compute_gradient(op):
    # Every rank perturbs the same element at the same time, so the numeric Jacobian is that
    # of the same allreduce everywhere: size * I for Sum, I for Average.
    x = tf.constant([1.0, 2.0, 3.0], dtype=tf.float64) * (hvd.rank() + 1)
    theoretical, numerical = tf.test.compute_gradient(lambda t: hvd.allreduce(t, op=op), [x])
    scale = hvd.size() if op == hvd.Sum else 1.0
    np.testing.assert_allclose(theoretical[0], scale * np.eye(3))
    np.testing.assert_allclose(numerical[0], scale * np.eye(3), rtol=1e-6)


def test_broadcast_and_alltoall_gradients_inside_tf_function():
    size, rank = hvd.size(), hvd.rank()

    @tf.function
    def gradients(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            broadcast = tf.reduce_sum(hvd.broadcast(x, root_rank=0) * (rank + 1))
            # Row j goes to rank j, which weighs what came from rank r by 10 r + j.
            received, _ = hvd.alltoall(x, splits=[1] * size)
            weights = tf.constant([10.0 * r + rank for r in range(size)])
            alltoall = tf.reduce_sum(received * weights)
        return tape.gradient(broadcast, x), tape.gradient(alltoall, x)

    broadcast_grad, alltoall_grad = gradients(tf.fill([size], float(rank)))
    # Broadcast: the average of every rank's gradient on the root, zeros elsewhere.
    root_share = (_ranks() + 1).mean() if rank == 0 else 0.0
    np.testing.assert_allclose(broadcast_grad.numpy(), np.full(size, root_share))
    # Alltoall: this rank's row j went to rank j, which weighed it by 10 rank + j.
    np.testing.assert_allclose(alltoall_grad.numpy(), [10.0 * rank + j for j in range(size)])


def test_sparse_gradients_are_gathered_or_made_dense():
    size, rank = hvd.size(), hvd.rank()
    expected = np.zeros([size, 2])
    for r in range(size):
        expected[r] = (r + 1) / size
    for sparse_as_dense in (False, True):
        table = tf.Variable(tf.zeros([size, 2]))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, [rank]) * (rank + 1))
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        (gradient,) = tape.gradient(loss, [table])
        assert isinstance(gradient, tf.IndexedSlices) != sparse_as_dense
        np.testing.assert_allclose(tf.convert_to_tensor(gradient).numpy(), expected)


def test_distributed_gradient_tape_averages_and_broadcast_variables():
    rank = hvd.rank()
    v = tf.Variable([float(rank), 2.0 * rank])
    hvd.broadcast_variables([v], root_rank=0)
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * (rank + 1))
    tape = hvd.DistributedGradientTape(tape)
    (gradient,) = tape.gradient(loss, [v])
    np.testing.assert_allclose(gradient.numpy(), np.full(2, (_ranks() + 1).mean()))


def test_ops_and_gradients_on_a_process_set():
    size, rank = hvd.size(), hvd.rank()
    members = np.arange(0, size, 2)
    evens = hvd.add_process_set([int(m) for m in members])
    try:
        if rank % 2 == 0:
            x = tf.Variable([float(rank)])
            with tf.GradientTape() as tape:
                gathered = hvd.allgather(x, process_set=evens)
                loss = tf.reduce_sum(gathered) * (rank + 1)
            np.testing.assert_array_equal(gathered.numpy(), members)
            # The gradient averaged over the set's members, this rank's row of it.
            np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [(members + 1).mean()])
            # root_rank is a global rank, as in Horovod.
            last = hvd.broadcast(tf.constant([float(rank)]), root_rank=int(members[-1]),
                                 process_set=evens)
            np.testing.assert_array_equal(last.numpy(), [members[-1]])
            summed = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, process_set=evens)
            np.testing.assert_array_equal(summed.numpy(), [len(members)])
    finally:
        hvd.remove_process_set(evens)


def test_mismatched_shapes_fail_on_every_rank_and_the_job_goes_on():
    if hvd.size() < 2:
        pytest.skip('needs at least 2 ranks')
    tensor = tf.ones([3 if hvd.rank() == 0 else 4])
    with pytest.raises(tf.errors.OpError, match="Mismatched allreduce tensor shapes for "
                                                "'allreduce.shape.mismatch'") as raised:
        hvd.allreduce(tensor, name='shape.mismatch')
    assert "collective allreduce of 'allreduce.shape.mismatch' failed" in raised.value.message
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([3]), op=hvd.Sum).numpy(),
                                  [hvd.size()] * 3)


def test_ops_fail_between_shutdown_and_init():
    # A second init() changes nothing but lends the client to the ops again:
    # giving back the first loan must leave the connection open.
    hvd.init()
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(),
                                  [hvd.size()] * 2)
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(tf.errors.FailedPreconditionError, match='not initialized'):
        hvd.allreduce(tf.ones([2]), op=hvd.Sum, name='after.shutdown')
    hvd.init()
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(),
                                  [hvd.size()] * 2)


def test_adasum_on_a_process_set_is_refused_at_the_call(evens):
    # Horovod: NotImplementedError before anything is submitted, whatever the set's size.
    if evens.included():
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Adasum, process_set=evens)
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.grouped_allreduce([tf.constant([1.0])], op=hvd.Adasum, process_set=evens)
        # Nothing was submitted: the set still runs a plain allreduce.
        total = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, process_set=evens)
        assert total.numpy().tolist() == [float(evens.size())]
    hvd.barrier()  # the others stay in the job until the set is done
