"""collective.tensorflow's reducescatter, grouped_reducescatter and grouped_allgather against
numpy references: rank r contributes tensors derived from r, so every rank can compute every
result, and the rows it keeps, in closed form. Eagerly and inside tf.function; gradients
against their analytic values; process sets; errors from the daemon on every rank."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def _contribution(rank, rows, cols=2):
    """What rank r gives: (r + 1) * (10 i + j + 1) at row i, column j."""
    grid = 10 * np.arange(rows)[:, None] + np.arange(cols)[None, :] + 1
    return (rank + 1) * grid.astype(np.float64)


def _own_rows(total, size, rank):
    """Horovod's split of `total` rows: the first (total mod size) ranks get one more."""
    counts = [total // size + (1 if r < total % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    return slice(start, start + counts[rank])


def _reduced(size, rows, cols=2):
    return sum(_contribution(r, rows, cols) for r in range(size))


_REDUCIBLE = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
              tf.bfloat16, tf.float32, tf.float64]


@pytest.mark.parametrize('dtype', _REDUCIBLE)
def test_reducescatter_sum_of_every_dtype_splits_rows_as_horovod(dtype):
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1  # uneven: rank 0 keeps one row more
    # Small values, so that 8-bit sums and bfloat16 stay exact.
    mine = tf.cast(tf.fill([rows, 3], rank + 1), dtype)
    result = hvd.reducescatter(mine, op=hvd.Sum)
    assert result.dtype == dtype
    want = np.full((rows, 3), size * (size + 1) / 2)[_own_rows(rows, size, rank)]
    np.testing.assert_array_equal(tf.cast(result, tf.float64).numpy(), want)


def test_reducescatter_average_is_the_default_and_scale_factors_apply():
    size, rank = hvd.size(), hvd.rank()
    rows = 3 * size + 2
    mine = tf.constant(_contribution(rank, rows))
    own = _own_rows(rows, size, rank)
    average = hvd.reducescatter(mine)
    np.testing.assert_allclose(average.numpy(), (_reduced(size, rows) / size)[own])
    scaled = hvd.reducescatter(mine, op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.5)
    np.testing.assert_allclose(scaled.numpy(), (1.5 * _reduced(size, rows))[own])
    compressed = hvd.reducescatter(tf.cast(mine, tf.float32), op=hvd.Sum,
                                   compression=hvd.Compression.fp16)
    assert compressed.dtype == tf.float32
    np.testing.assert_allclose(compressed.numpy(), _reduced(size, rows)[own], rtol=1e-3)


def test_reducescatter_of_fewer_rows_than_ranks():
    size, rank = hvd.size(), hvd.rank()
    # One row: rank 0 keeps it, every other rank gets none.
    result = hvd.reducescatter(tf.constant(_contribution(rank, 1)), op=hvd.Sum)
    assert result.shape == ((1 if rank == 0 else 0), 2)
    np.testing.assert_allclose(result.numpy(), _reduced(size, 1)[_own_rows(1, size, rank)])


def test_grouped_reducescatter():
    size, rank = hvd.size(), hvd.rank()
    row_counts = (1, size, 2 * size + 1)
    tensors = [tf.constant(_contribution(rank, n, cols=n % 3 + 1)) for n in row_counts]
    results = hvd.grouped_reducescatter(tensors, op=hvd.Sum)
    assert len(results) == len(row_counts)
    for n, result in zip(row_counts, results):
        np.testing.assert_allclose(result.numpy(),
                                   _reduced(size, n, n % 3 + 1)[_own_rows(n, size, rank)])
    averaged = hvd.grouped_reducescatter(tensors, prescale_factor=2.0)
    for n, result in zip(row_counts, averaged):
        np.testing.assert_allclose(
            result.numpy(), (2.0 * _reduced(size, n, n % 3 + 1) / size)[_own_rows(n, size, rank)])
    assert hvd.grouped_reducescatter([]) == []


def test_grouped_allgather_of_uneven_rows_and_every_dtype():
    size, rank = hvd.size(), hvd.rank()
    for dtype in _REDUCIBLE + [tf.bool]:
        # Rank r gives r rows (rank 0 none) of r % 2, and one row of 1.
        first = tf.cast(tf.fill([rank, 2], rank % 2), dtype)
        second = tf.cast(tf.ones([1, 3]), dtype)
        gathered = hvd.grouped_allgather([first, second])
        assert [g.dtype for g in gathered] == [dtype, dtype]
        expected = np.concatenate([np.full((r, 2), r % 2) for r in range(size)])
        np.testing.assert_array_equal(tf.cast(gathered[0], tf.float64).numpy(), expected)
        np.testing.assert_array_equal(tf.cast(gathered[1], tf.float64).numpy(),
                                      np.ones((size, 3)))
    assert hvd.grouped_allgather([]) == []


def test_inside_tf_function_with_shape_functions():
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float64)])
    def step(x):
        scattered = hvd.reducescatter(x, op=hvd.Sum)
        grouped = hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum)
        gathered = hvd.grouped_allgather([x[:1], x])
        return scattered, grouped, gathered

    outputs = step.get_concrete_function().structured_outputs
    assert outputs[0].shape.as_list() == [None, 2]
    assert [g.shape.as_list() for g in outputs[2]] == [[None, 2], [None, 2]]
    for call in range(2):  # the traced names serve twice
        x = tf.constant(_contribution(rank, rows) + call)
        scattered, grouped, gathered = step(x)
        want = (_reduced(size, rows) + size * call)[_own_rows(rows, size, rank)]
        np.testing.assert_allclose(scattered.numpy(), want)
        np.testing.assert_allclose(grouped[0].numpy(), want)
        np.testing.assert_allclose(grouped[1].numpy(), 2 * want)
        np.testing.assert_allclose(
            gathered[0].numpy(), np.stack([_contribution(r, 1)[0] + call for r in range(size)]))
        assert gathered[1].shape == (size * rows, 2)


def test_scalars_are_refused_by_the_shape_function_as_horovod_does():
    with pytest.raises(ValueError, match='CollectiveReducescatter does not support scalar inputs'):
        tf.function(lambda: hvd.reducescatter(tf.constant(1.0))).get_concrete_function()
    with pytest.raises(ValueError,
                       match='CollectiveGroupedReducescatter does not support scalar inputs'):
        tf.function(lambda: hvd.grouped_reducescatter(
            [tf.ones([2]), tf.constant(1.0)])).get_concrete_function()
    # Eagerly no shape function runs: libcollective refuses it, on every rank alike.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match='needs a tensor of at least one dimension'):
        hvd.reducescatter(tf.constant(1.0), name='scalar')
    with pytest.raises(NotImplementedError, match='tf.IndexedSlices'):
        hvd.reducescatter(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])))


@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_reducescatter_gradient_is_the_scaled_allgather(op):
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    x = tf.Variable(tf.ones([rows, 2], tf.float64))

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            scattered = hvd.reducescatter(x, op=op, prescale_factor=2.0, postscale_factor=0.25)
            loss = tf.reduce_sum(scattered) * (rank + 1)
        return tape.gradient(loss, x)

    # Each rank's output gradient is rank + 1 on its own rows; Horovod's gradient is their
    # allgather times the scale factors, times the set's size for Sum.
    scale = 0.5 * (size if op == hvd.Sum else 1)
    expected = np.concatenate([np.full((_own_rows(rows, size, r).stop
                                        - _own_rows(rows, size, r).start, 2), scale * (r + 1))
                               for r in range(size)])
    np.testing.assert_allclose(gradient().numpy(), expected)
    with tf.GradientTape() as tape:  # eagerly too
        loss = tf.reduce_sum(hvd.reducescatter(x, op=op, prescale_factor=2.0,
                                               postscale_factor=0.25)) * (rank + 1)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), expected)


def test_grouped_gradients():
    size, rank = hvd.size(), hvd.rank()
    rows = size + 1
    xs = [tf.Variable(tf.ones([rows, 2])), tf.Variable(tf.ones([rank + 1, 3]))]
    with tf.GradientTape(persistent=True) as tape:
        scattered = hvd.grouped_reducescatter([xs[0], 2 * xs[0]], op=hvd.Sum)
        scatter_loss = tf.add_n([tf.reduce_sum(s) for s in scattered]) * (rank + 1)
        gathered = hvd.grouped_allgather(xs)
        gather_loss = tf.add_n([tf.reduce_sum(g) for g in gathered]) * (rank + 1)
    # Grouped reducescatter (Sum): size times the allgathered output gradients, which are
    # rank + 1 on each rank's rows; 1 + 2 from the two members.
    expected = np.concatenate([np.full((_own_rows(rows, size, r).stop
                                        - _own_rows(rows, size, r).start, 2), 3 * size * (r + 1))
                               for r in range(size)])
    np.testing.assert_allclose(tape.gradient(scatter_loss, xs[0]).numpy(), expected)
    # Grouped allgather: the average over ranks of rank + 1, on this rank's rows of each.
    mean = np.mean(np.arange(size) + 1.0)
    gradients = tape.gradient(gather_loss, xs)
    np.testing.assert_allclose(gradients[0].numpy(), np.full((rows, 2), mean))
    np.testing.assert_allclose(gradients[1].numpy(), np.full((rank + 1, 3), mean))


def test_on_a_process_set(evens):
    rank = hvd.rank()
    members = evens.ranks
    if rank % 2 == 0:
        set_rank, set_size = members.index(rank), len(members)
        rows = 2 * set_size + 1
        mine = tf.constant(_contribution(rank, rows))
        want = sum(_contribution(r, rows) for r in members)
        result = hvd.reducescatter(mine, op=hvd.Sum, process_set=evens)
        np.testing.assert_allclose(result.numpy(), want[_own_rows(rows, set_size, set_rank)])
        grouped = hvd.grouped_reducescatter([mine], op=hvd.Sum, process_set=evens)
        np.testing.assert_allclose(grouped[0].numpy(),
                                   want[_own_rows(rows, set_size, set_rank)])
        gathered = hvd.grouped_allgather([tf.constant([[float(rank)]])], process_set=evens)
        np.testing.assert_array_equal(gathered[0].numpy(), np.array(members, float)[:, None])
        x = tf.Variable(tf.ones([rows, 1]))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(hvd.reducescatter(x, process_set=evens)) * (rank + 1)
        expected = np.concatenate([
            np.full(_own_rows(rows, set_size, i).stop - _own_rows(rows, set_size, i).start,
                    float(r + 1)) for i, r in enumerate(members)])
        np.testing.assert_allclose(tape.gradient(loss, x).numpy()[:, 0], expected)


def test_errors_from_the_daemon_on_every_rank():
    size, rank = hvd.size(), hvd.rank()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match='reducescatter supports the sum and average reduce ops') as raised:
        hvd.reducescatter(tf.ones([size, 2]), op=hvd.Max, name='max.refused')
    assert "collective reducescatter of 'reducescatter.max.refused' failed" in \
        raised.value.message
    if size > 1:
        mismatch = tf.ones([size, 2 + (rank == 0)])
        with pytest.raises(tf.errors.OpError, match='Mismatched'):
            hvd.reducescatter(mismatch, op=hvd.Sum, name='shape.mismatch')
        with pytest.raises(tf.errors.OpError, match='Mismatched'):
            hvd.grouped_reducescatter([tf.ones([size]), mismatch], op=hvd.Sum)
        with pytest.raises(tf.errors.OpError):
            hvd.grouped_allgather([tf.ones([1, 2 + (rank == 0)])])
    # The job goes on.
    np.testing.assert_array_equal(hvd.reducescatter(tf.ones([size]), op=hvd.Sum).numpy(),
                                  [size])
