"""collective.mpi4torch as mpi4torch's users find it (issue 48, items 16 and 17): receives
write into the buffer passed, the bitwise reductions on integer tensors, MINLOC/MAXLOC on
(value, index) pairs, and ``comm_from_mpi4py`` (with a stand-in mpi4py module, whose
COMM_WORLD is the job, as under mpirun)."""

import functools
import sys
import types

import pytest
import torch

import collective.mpi4torch as mpi4torch
import collective.torch as hvd
from collective.common import connection, process_sets
from mpi4torch_checks import comm


def _right():
    return (comm.rank + 1) % comm.size


def _left():
    return (comm.rank - 1) % comm.size


def _message(rank):
    return torch.arange(6, dtype=torch.float64).reshape(2, 3) + 100 * rank


# --- Item 16: receives write into the buffer ----------------------------------------------------

@pytest.mark.parametrize('blocking', [True, False])
@pytest.mark.parametrize('contiguous', [True, False])
def test_a_receive_writes_into_the_buffer_passed(blocking, contiguous):
    handle = comm.Isend(_message(comm.rank), _right(), 3)
    buffer = torch.zeros(2, 3, dtype=torch.float64) if contiguous else \
        torch.zeros(3, 2, dtype=torch.float64).t()
    if blocking:
        received = comm.Recv(buffer, _left(), 3)
    else:
        received = comm.Wait(comm.Irecv(buffer, _left(), 3))
    comm.Wait(handle)
    # Code that reads the buffer instead of the return value sees what arrived.
    assert torch.equal(buffer, _message(_left()))
    assert torch.equal(received, _message(_left()))
    # The result is the buffer's memory, as mpi4torch's Wait returns it.
    assert received.data_ptr() == buffer.data_ptr()


def test_a_receive_into_a_buffer_keeps_its_gradient_path():
    a = _message(comm.rank).requires_grad_()
    handle = comm.Isend(a, _right(), 4)
    buffer = mpi4torch.JoinDummies(torch.zeros(2, 3, dtype=torch.float64), [handle.dummy])
    b = comm.Recv(buffer, _left(), 4)
    sent = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [b]))
    result = mpi4torch.JoinDummies(a + 2 * b, [sent])
    assert torch.equal(buffer, _message(_left()))
    result.sum().backward()
    # d/d a_r of sum_s (a_s + 2 a_{s-1}) = 1 + 2
    assert torch.equal(a.grad, torch.full((2, 3), 3.0, dtype=torch.float64))


# --- Item 17: bitwise reductions, MINLOC/MAXLOC ---------------------------------------------------

_INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _bits(rank, dtype):
    """Values that set and clear bits differently on each rank (the sign bit too)."""
    base = torch.tensor([[0x5A, 0x0F, 0x7C], [0x33, 0x01, 0x7F]], dtype=torch.int64)
    value = (base * (rank + 3)) ^ (rank * 0x11)
    if dtype != torch.uint8:
        value = value - 64 * (rank % 2)  # negative values on odd ranks
    return value.to(dtype)


@pytest.mark.parametrize('op,combine', [(mpi4torch.MPI_BAND, torch.bitwise_and),
                                        (mpi4torch.MPI_BOR, torch.bitwise_or),
                                        (mpi4torch.MPI_BXOR, torch.bitwise_xor)])
@pytest.mark.parametrize('dtype', _INTEGER_DTYPES, ids=str)
def test_bitwise_reductions_of_integer_tensors(op, combine, dtype):
    expected = functools.reduce(combine, [_bits(r, dtype) for r in range(comm.size)])
    result = comm.Allreduce(_bits(comm.rank, dtype), op)
    assert result.dtype == dtype and torch.equal(result, expected)
    root = comm.size - 1
    reduced = comm.Reduce_(_bits(comm.rank, dtype), op, root)
    if comm.rank == root:
        assert torch.equal(reduced, expected)


def test_bitwise_reductions_of_a_scalar():
    value = torch.tensor(1 << comm.rank, dtype=torch.int64)
    assert int(comm.Allreduce(value, mpi4torch.MPI_BOR)) == (1 << comm.size) - 1


@pytest.mark.parametrize('op', [mpi4torch.MPI_BAND, mpi4torch.MPI_BOR, mpi4torch.MPI_BXOR])
def test_bitwise_reductions_refuse_floating_point_tensors(op):
    with pytest.raises(ValueError, match='bitwise reduction: it takes integer'):
        comm.Allreduce(torch.ones(3), op)


def _pairs(rank, dtype):
    """(value, index) pairs: ties between ranks in the first two, a unique extreme after."""
    values = torch.tensor([5, rank % 2, 10 * rank, -rank], dtype=torch.float64)
    indices = torch.tensor([rank, 7 - rank, rank, 2 * rank], dtype=torch.float64)
    return torch.stack([values, indices], dim=-1).to(dtype)


def _loc_reference(op, dtype):
    pairs = torch.stack([_pairs(r, dtype) for r in range(comm.size)])  # [rank, pair, 2]
    values, indices = pairs[..., 0], pairs[..., 1]
    extreme = values.min(0).values if op == mpi4torch.MPI_MINLOC else values.max(0).values
    largest = float('inf') if dtype.is_floating_point else torch.iinfo(dtype).max
    index = torch.where(values == extreme, indices, torch.full_like(indices, largest)).min(0)
    return torch.stack([extreme, index.values], dim=-1)


@pytest.mark.parametrize('op', [mpi4torch.MPI_MINLOC, mpi4torch.MPI_MAXLOC])
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.int32, torch.int64],
                         ids=str)
def test_minloc_and_maxloc_of_value_index_pairs(op, dtype):
    expected = _loc_reference(op, dtype)
    result = comm.Allreduce(_pairs(comm.rank, dtype), op)
    assert result.dtype == dtype and torch.equal(result, expected)
    # On ties MPI takes the smallest index: pair 0 holds 5 everywhere, at index = rank.
    assert result[0].tolist() == [5, 0]
    reduced = comm.Reduce_(_pairs(comm.rank, dtype), op, 0)
    if comm.rank == 0:
        assert torch.equal(reduced, expected)


def test_minloc_refuses_a_tensor_of_no_pairs():
    with pytest.raises(ValueError, match='MPI_MINLOC reduces \\(value, index\\) pairs'):
        comm.Allreduce(torch.ones(3), mpi4torch.MPI_MINLOC)


def test_minloc_has_no_adjoint_as_in_mpi4torch():
    x = _pairs(comm.rank, torch.float64).requires_grad_()
    y = comm.Allreduce(x, mpi4torch.MPI_MINLOC)
    with pytest.raises(RuntimeError, match='MPI_SUM only'):
        y.sum().backward()


# --- Item 17: comm_from_mpi4py ------------------------------------------------------------------

class _Group:
    def __init__(self, ranks):
        self.ranks = list(ranks)

    def Translate_ranks(self, ranks, other):  # noqa: N802 (mpi4py's name)
        return [other.ranks.index(self.ranks[r]) for r in ranks]


class _Comm:
    """An mpi4py communicator of the given world ranks, as this process sees it."""

    def __init__(self, ranks, my_world_rank):
        self.ranks = list(ranks)
        self.me = my_world_rank

    def Get_size(self):  # noqa: N802
        return len(self.ranks)

    def Get_rank(self):  # noqa: N802
        return self.ranks.index(self.me)

    def Get_group(self):  # noqa: N802
        return _Group(self.ranks)

    def __eq__(self, other):
        return isinstance(other, _Comm) and (self.ranks, self.me) == (other.ranks, other.me)

    def __ne__(self, other):
        return not self == other


@pytest.fixture
def fake_mpi4py(monkeypatch):
    """``from mpi4py import MPI`` gives a stand-in whose COMM_WORLD is the job's ranks. The
    process sets a test registers are removed after it (every rank removes the same ones)."""
    world = _Comm(range(comm.size), comm.rank)
    mpi = types.SimpleNamespace(COMM_WORLD=world, COMM_NULL=_Comm([], -1))
    module = types.ModuleType('mpi4py')
    module.MPI = mpi
    monkeypatch.setitem(sys.modules, 'mpi4py', module)
    before = {set_id for set_id, _ in connection.current().client.process_sets()}
    yield mpi
    added = sorted((set_id, tuple(ranks))
                   for set_id, ranks in connection.current().client.process_sets()
                   if set_id not in before)
    for _, ranks in added:
        assert hvd.remove_process_set(process_sets.find_process_set(ranks))


def _set_count():
    return len(connection.current().client.process_sets())


def test_comm_from_mpi4py_of_comm_world(fake_mpi4py):
    world = mpi4torch.comm_from_mpi4py(fake_mpi4py.COMM_WORLD)
    assert (world.rank, world.size) == (comm.rank, comm.size)
    total = world.Allreduce(torch.tensor([float(comm.rank)]), mpi4torch.MPI_SUM)
    assert total.item() == sum(range(comm.size))


def test_comm_from_mpi4py_of_a_split(fake_mpi4py, two_ranks):
    # COMM_WORLD.Split(color=rank % 2): each rank holds its color's communicator.
    members = [r for r in range(comm.size) if r % 2 == comm.rank % 2]
    before = _set_count()
    split = mpi4torch.comm_from_mpi4py(_Comm(members, comm.rank))
    assert (split.rank, split.size) == (members.index(comm.rank), len(members))
    total = split.Allreduce(torch.tensor([float(comm.rank)]), mpi4torch.MPI_SUM)
    assert total.item() == sum(members)
    # The same split again: its process sets exist, none is added.
    registered = _set_count()
    assert registered <= before + 2  # evens and odds, unless init() made them
    again = mpi4torch.comm_from_mpi4py(_Comm(members, comm.rank))
    assert _set_count() == registered and again.size == len(members)


def test_comm_from_mpi4py_of_comm_null_takes_part_and_refuses(fake_mpi4py, two_ranks):
    # Split with rank 0 left out (color MPI.UNDEFINED): it gets COMM_NULL.
    others = list(range(1, comm.size))
    given = fake_mpi4py.COMM_NULL if comm.rank == 0 else _Comm(others, comm.rank)
    if comm.rank == 0:
        with pytest.raises(ValueError, match='COMM_NULL'):
            mpi4torch.comm_from_mpi4py(given)
    else:
        assert mpi4torch.comm_from_mpi4py(given).size == len(others)


def test_comm_from_mpi4py_refuses_another_world(fake_mpi4py):
    fake_mpi4py.COMM_WORLD = _Comm([0], 0)  # a singleton MPI world (no mpirun)
    if comm.size > 1 or comm.rank != 0:
        with pytest.raises(ValueError, match='is not the job'):
            mpi4torch.comm_from_mpi4py(fake_mpi4py.COMM_WORLD)


def test_comm_from_mpi4py_refuses_a_reordered_communicator(fake_mpi4py, two_ranks):
    reordered = _Comm(list(reversed(range(comm.size))), comm.rank)
    with pytest.raises(ValueError, match='another order'):
        mpi4torch.comm_from_mpi4py(reordered)


def test_comm_from_mpi4py_without_mpi4py(monkeypatch):
    monkeypatch.setitem(sys.modules, 'mpi4py', None)
    with pytest.raises(RuntimeError, match='mpi4py is not available!'):
        mpi4torch.comm_from_mpi4py(object())
