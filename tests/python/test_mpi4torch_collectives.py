"""collective.mpi4torch's collectives, forward and backward, against single-process references.

Each function runs on every rank with per-rank inputs and per-rank upstream
gradients; the references (plain torch on every rank's regenerated input)
give the outputs and gradients mpi4torch's adjoints must produce.
"""

import pytest
import torch

import collective.mpi4torch as mpi4torch
from mpi4torch_checks import (check_against_reference, comm, gradcheck_each_rank, rank_data,
                              upstream)


def _inputs(shape_of_rank, seed=0):
    return [rank_data(r, shape_of_rank(r), seed) for r in range(comm.size)]


def test_world():
    import collective.torch as hvd
    assert comm.rank == hvd.rank()
    assert comm.size == hvd.size()


# --- Allreduce ---------------------------------------------------------------------------------

def test_allreduce_sum():
    inputs = _inputs(lambda r: (3, 4))
    check_against_reference(lambda x: comm.Allreduce(x, mpi4torch.MPI_SUM),
                            lambda xs: [sum(xs)] * len(xs), inputs)


def test_allreduce_gradcheck():
    gradcheck_each_rank(lambda x: comm.Allreduce(x, mpi4torch.MPI_SUM),
                        [rank_data(comm.rank, (4,)).requires_grad_()])


def _small_ints(rank, dtype):
    return ((torch.arange(12).reshape(3, 4) * 3 + rank * 5) % 4).to(dtype)


@pytest.mark.parametrize('op,combine', [
    (mpi4torch.MPI_SUM, lambda a, b: a + b),
    (mpi4torch.MPI_MAX, torch.maximum),
    (mpi4torch.MPI_MIN, torch.minimum),
    (mpi4torch.MPI_PROD, lambda a, b: a * b),
])
@pytest.mark.parametrize('dtype', [torch.int32, torch.float64])
def test_allreduce_arithmetic_ops(op, combine, dtype):
    expected = _small_ints(0, dtype)
    for r in range(1, comm.size):
        expected = combine(expected, _small_ints(r, dtype))
    result = comm.Allreduce(_small_ints(comm.rank, dtype), op)
    assert result.dtype == dtype
    assert torch.equal(result, expected)


@pytest.mark.parametrize('op,combine', [
    (mpi4torch.MPI_LAND, torch.logical_and),
    (mpi4torch.MPI_LOR, torch.logical_or),
    (mpi4torch.MPI_LXOR, torch.logical_xor),
])
@pytest.mark.parametrize('dtype', [torch.int64, torch.float32, torch.bool])
def test_allreduce_logical_ops(op, combine, dtype):
    expected = _small_ints(0, dtype) != 0
    for r in range(1, comm.size):
        expected = combine(expected, _small_ints(r, dtype) != 0)
    result = comm.Allreduce(_small_ints(comm.rank, dtype), op)
    assert result.dtype == dtype
    assert torch.equal(result, expected.to(dtype))


@pytest.mark.parametrize('op,logical', [(mpi4torch.MPI_BAND, torch.logical_and),
                                        (mpi4torch.MPI_BOR, torch.logical_or),
                                        (mpi4torch.MPI_BXOR, torch.logical_xor)])
def test_allreduce_bitwise_ops_on_bool(op, logical):
    expected = _small_ints(0, torch.bool)
    for r in range(1, comm.size):
        expected = logical(expected, _small_ints(r, torch.bool))
    assert torch.equal(comm.Allreduce(_small_ints(comm.rank, torch.bool), op), expected)


@pytest.mark.parametrize('op', [mpi4torch.MPI_MINLOC, mpi4torch.MPI_MAXLOC, 12, -1])
def test_allreduce_unavailable_ops_refused(op):
    with pytest.raises(ValueError, match='MPI_MINLOC|MPI_MAXLOC|not one of mpi4torch'):
        comm.Allreduce(torch.ones(3), op)


def test_allreduce_backward_needs_sum():
    x = rank_data(comm.rank, (3,)).requires_grad_()
    y = comm.Allreduce(x, mpi4torch.MPI_MAX)
    assert torch.equal(y, torch.stack([rank_data(r, (3,)) for r in range(comm.size)]).max(0).values)
    with pytest.raises(RuntimeError, match='MPI_SUM only'):
        y.sum().backward()


# --- Bcast_ and Reduce_ ------------------------------------------------------------------------

@pytest.mark.parametrize('root', [0, -1])
def test_bcast_forward_in_place(root):
    root = root % comm.size
    x = rank_data(comm.rank, (5, 2))
    y = comm.Bcast_(x, root)
    assert torch.equal(y, rank_data(root, (5, 2)))
    assert torch.equal(x, y) and x.data_ptr() == y.data_ptr()


def test_bcast_non_contiguous_input():
    x = rank_data(comm.rank, (4, 6)).t()
    y = comm.Bcast_(x, 0)
    assert torch.equal(x, rank_data(0, (4, 6)).t()) and torch.equal(y, x)


@pytest.mark.parametrize('root', [0, 1])
def test_bcast_backward(root):
    root = root % comm.size
    inputs = _inputs(lambda r: (3, 2))
    check_against_reference(lambda x: comm.Bcast_(x * 1, root),
                            lambda xs: [xs[root] * 1] * len(xs), inputs)


def test_bcast_gradcheck():
    gradcheck_each_rank(lambda x: comm.Bcast_(x * 1, comm.size - 1),
                        [rank_data(comm.rank, (3,)).requires_grad_()])


def test_bcast_of_a_leaf_as_mpi4torch_tests_it():
    x = rank_data(comm.rank, (10,)).requires_grad_()
    comm.Bcast_(x, 0).sum().backward()
    assert torch.equal(x.grad, torch.full((10,), float(comm.size) if comm.rank == 0 else 0.0,
                                          dtype=torch.float64))


@pytest.mark.parametrize('root', [0, 1])
def test_reduce_sum(root):
    root = root % comm.size
    inputs = _inputs(lambda r: (2, 3))

    def reference(xs):
        return [sum(xs) if r == root else torch.zeros(2, 3, dtype=torch.float64) + 0 * sum(xs)
                for r in range(len(xs))]

    check_against_reference(lambda x: comm.Reduce_(x * 1, mpi4torch.MPI_SUM, root), reference,
                            inputs)


def test_reduce_writes_its_input():
    x = rank_data(comm.rank, (4,))
    y = comm.Reduce_(x, mpi4torch.MPI_SUM, 0)
    if comm.rank == 0:
        assert torch.allclose(x, sum(rank_data(r, (4,)) for r in range(comm.size)))
    else:
        assert torch.equal(x, torch.zeros(4, dtype=torch.float64))
    assert torch.equal(x, y)


@pytest.mark.parametrize('op,combine', [(mpi4torch.MPI_MAX, torch.maximum),
                                        (mpi4torch.MPI_PROD, torch.mul),
                                        (mpi4torch.MPI_LOR, torch.logical_or)])
def test_reduce_other_ops(op, combine):
    expected = _small_ints(0, torch.int32)
    if op == mpi4torch.MPI_LOR:
        expected = expected != 0
    for r in range(1, comm.size):
        other = _small_ints(r, torch.int32)
        expected = combine(expected, other != 0 if op == mpi4torch.MPI_LOR else other)
    result = comm.Reduce_(_small_ints(comm.rank, torch.int32), op, comm.size - 1)
    if comm.rank == comm.size - 1:
        assert torch.equal(result, expected.to(torch.int32))
    else:
        assert torch.equal(result, torch.zeros(3, 4, dtype=torch.int32))


def test_reduce_gradcheck():
    gradcheck_each_rank(lambda x: comm.Reduce_(x * 1, mpi4torch.MPI_SUM, 0),
                        [rank_data(comm.rank, (3,)).requires_grad_()])


def test_reduce_of_a_leaf_as_mpi4torch_tests_it():
    x = rank_data(comm.rank, (10,)).requires_grad_()
    comm.Reduce_(x, mpi4torch.MPI_SUM, 0).sum().backward()
    assert torch.equal(x.grad, torch.ones(10, dtype=torch.float64))


@pytest.mark.parametrize('function', ['Reduce_', 'Bcast_'])
def test_in_place_input_reused_raises_in_backward(function):
    x = 0.0 + rank_data(comm.rank, (10,)).requires_grad_()
    if function == 'Reduce_':
        result = comm.Reduce_(x, mpi4torch.MPI_SUM, 0)
    else:
        result = comm.Bcast_(x, 0)
    loss = (x + result).sum()
    with pytest.raises(RuntimeError, match=f'in-place collective.mpi4torch function {function}'):
        loss.backward()


def test_in_place_overwrite_of_a_saved_tensor_raises():
    x = 0.0 + rank_data(comm.rank, (4,)).requires_grad_()
    square = x * x  # saves x
    comm.Reduce_(x, mpi4torch.MPI_SUM, 0)
    with pytest.raises(RuntimeError, match='modified by an inplace operation'):
        square.sum().backward()


# --- Gather, Scatter, Allgather -----------------------------------------------------------------

def _cat_along(xs, axis):
    return torch.cat(xs, dim=axis)


@pytest.mark.parametrize('root', [0, 1])
def test_gather(root):
    root = root % comm.size
    inputs = _inputs(lambda r: (2, r + 1, 3))

    def reference(xs):
        return [_cat_along(xs, 1) if r == root else xs[r].new_empty((2, 0, 3)) + 0 * xs[r].sum()
                for r in range(len(xs))]

    check_against_reference(lambda x: comm.Gather(x, 1, root), reference, inputs)


def test_gather_gradcheck():
    gradcheck_each_rank(lambda x: comm.Scatter(comm.Gather(x, 0, 0), 0, 2, 0),
                        [rank_data(comm.rank, (2, 2)).requires_grad_()])


def _scatter_reference(root, axis, counts):
    def reference(xs):
        pieces = torch.split(xs[root], counts, dim=axis)
        return [piece + 0 * xs[r].sum() for r, piece in enumerate(pieces)]
    return reference


@pytest.mark.parametrize('root', [0, 1])
def test_scatter(root):
    root = root % comm.size
    counts = [r + 1 for r in range(comm.size)]
    full = (3, sum(counts), 2)
    # Only the root's tensor counts; the others give only the dtype (mpi4torch passes
    # torch.rand(1) there).
    inputs = [rank_data(r, full if r == root else (1,)) for r in range(comm.size)]
    check_against_reference(lambda x: comm.Scatter(x, 1, counts[comm.rank], root),
                            _scatter_reference(root, 1, counts), inputs)


def test_scatter_gradcheck():
    size = comm.size
    gradcheck_each_rank(lambda x: comm.Scatter(x, 1, 1, 0),
                        [rank_data(comm.rank, (2, size)).requires_grad_()])


def test_scatter_then_gather_is_the_identity_at_the_root():
    full = rank_data(0, (2, 5, comm.size, 2, 3))
    tensor = full if comm.rank == 0 else torch.rand(1, dtype=torch.float64)
    back = comm.Gather(comm.Scatter(tensor, 2, 1, 0), 2, 0)
    if comm.rank == 0:
        assert torch.equal(back, full)


@pytest.mark.parametrize('count_of_rank', [lambda r: r + 1, lambda r: 2],
                         ids=['uneven', 'even'])
def test_allgather(count_of_rank):
    inputs = _inputs(lambda r: (2, count_of_rank(r)))
    check_against_reference(lambda x: comm.Allgather(x, -1),
                            lambda xs: [_cat_along(xs, 1)] * len(xs), inputs)


@pytest.mark.parametrize('uneven', [False, True])
def test_allgather_gradcheck(uneven):
    # gradcheck calls the function once per input element: the inputs have one shape on every
    # rank, and the uneven case slices a different number of rows out of it on each.
    def function(x):
        return comm.Allgather(x[:comm.rank + 1] if uneven else x, 0)

    gradcheck_each_rank(function, [rank_data(comm.rank, (comm.size, 2)).requires_grad_()])


def test_axis_out_of_range_refused():
    with pytest.raises(ValueError, match='gatheraxis 3 is not an axis'):
        comm.Allgather(torch.ones(2, 2), 3)


# --- Alltoall ----------------------------------------------------------------------------------

def _alltoall_reference(gather, scatter, counts):
    def reference(xs):
        outputs = []
        for r in range(len(xs)):
            start = sum(counts[:r])
            outputs.append(torch.cat([x.narrow(scatter, start, counts[r]) for x in xs],
                                     dim=gather))
        return outputs
    return reference


@pytest.mark.parametrize('gather,scatter', [(1, 2), (2, 0), (-1, 0)])
def test_alltoall_two_axes(gather, scatter):
    counts = [r + 1 for r in range(comm.size)]
    total = sum(counts)

    def shape(r):
        dims = [2, 3, 4]
        dims[scatter] = total
        dims[gather % 3] = r + 2  # senders differ along gatheraxis
        return tuple(dims)

    check_against_reference(lambda x: comm.Alltoall(x, gather, scatter, counts[comm.rank]),
                            _alltoall_reference(gather, scatter, counts), _inputs(shape))


def test_alltoall_one_axis_redistributes():
    held = [comm.size - r for r in range(comm.size)]
    wanted = [r + 1 for r in range(comm.size)]
    inputs = _inputs(lambda r: (held[r], 3))

    def reference(xs):
        return list(torch.split(torch.cat(xs, dim=0), wanted, dim=0))

    check_against_reference(lambda x: comm.Alltoall(x, 0, 0, wanted[comm.rank]), reference,
                            inputs)


def test_alltoall_round_trip_as_mpi4torch_tests_it():
    tensor = rank_data(comm.rank, (3, 4, 2, 4, 3 * comm.size, 2))
    there = comm.Alltoall(tensor, 2, 4, 3)
    assert torch.equal(comm.Alltoall(there, 4, 2, 2), tensor)


def test_alltoall_gradcheck():
    size = comm.size
    gradcheck_each_rank(lambda x: comm.Alltoall(x, 0, 1, 1),
                        [rank_data(comm.rank, (2, size)).requires_grad_()])


def test_alltoall_slices_that_do_not_add_up_refused_everywhere():
    tensor = torch.ones(2, comm.size + 1)
    with pytest.raises(ValueError, match='slices along scatteraxis'):
        comm.Alltoall(tensor, 0, 1, 1)


# --- communicators -----------------------------------------------------------------------------

def test_process_set_communicator(static_process_sets):
    evens, odds = static_process_sets
    mine = evens if comm.rank % 2 == 0 else odds
    sub = mpi4torch.comm_from_process_set(mine)
    assert sub.size == len(mine.ranks)
    assert sub.rank == mine.ranks.index(comm.rank)
    x = torch.tensor([float(comm.rank)], dtype=torch.float64)
    assert sub.Allreduce(x, mpi4torch.MPI_SUM).item() == float(sum(mine.ranks))


def test_root_out_of_range_refused():
    with pytest.raises(ValueError, match='root 99 is not a rank of this communicator'):
        comm.Bcast_(torch.ones(2), 99)


# --- Results in the arena ------------------------------------------------------------------------

def _copied_out_bytes():
    from collective.common import connection
    return connection.current().client.copied_out_bytes


def test_large_results_are_written_by_the_daemon_into_the_arena():
    x = torch.full((1 << 16,), float(comm.rank + 1))  # 256 KiB: its result goes to the arena
    copied = _copied_out_bytes()
    total = comm.Allreduce(x, mpi4torch.MPI_SUM)
    twice = comm.Allreduce(total, mpi4torch.MPI_SUM)  # read in place: the result is in the arena
    assert _copied_out_bytes() == copied  # on one node and across nodes alike
    expected = sum(r + 1 for r in range(comm.size))
    assert torch.equal(total, torch.full_like(x, expected))
    assert torch.equal(twice, torch.full_like(x, expected * comm.size))
    # A small result is an ordinary tensor, copied out.
    copied = _copied_out_bytes()
    small = comm.Allreduce(torch.ones(3), mpi4torch.MPI_SUM)
    assert _copied_out_bytes() == copied + 3 * 4
    assert small.tolist() == [comm.size] * 3


def test_allgathers_adjoint_is_a_reducescatter_written_into_the_arena():
    # Every rank gives as many rows: the adjoint is a reduce-scatter, whose
    # rows (256 KiB) the daemon writes into an arena tensor, on one node and
    # across nodes alike.
    rows = 1 << 14
    x = torch.full((rows, 4), float(comm.rank + 1), requires_grad=True)
    gathered = comm.Allgather(x, 0)
    weights = torch.arange(comm.size * rows, dtype=torch.float32).unsqueeze(1).expand(-1, 4)
    copied = _copied_out_bytes()
    (gathered * weights).sum().backward()
    assert _copied_out_bytes() == copied
    # d/dx of every rank's sum: comm.size times this rank's rows of the weights.
    mine = weights[comm.rank * rows:(comm.rank + 1) * rows]
    assert torch.equal(x.grad, comm.size * mine)


def test_collective_torch_to_arena_moves_an_mpi4torch_input_on_their_shared_connection():
    # collective.torch.to_arena works on the connection mpi4torch opened at its first use.
    from collective.torch import in_arena, to_arena
    x = torch.full((1 << 10,), float(comm.rank + 1))
    assert to_arena(x) == x.numel() * x.element_size() and in_arena(x)
    total = comm.Allreduce(x, mpi4torch.MPI_SUM)
    assert torch.equal(total, torch.full_like(x, sum(r + 1 for r in range(comm.size))))
    assert torch.equal(x, torch.full_like(x, comm.rank + 1.0))  # an input, left as it was
