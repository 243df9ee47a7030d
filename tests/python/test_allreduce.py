"""allreduce in all its forms: every dtype and op, scale factors, in place, async, grouped, fused,
and of tensors that lie in the client's shared-memory arena."""

import time
import warnings

import pytest
import torch

import collective.torch as hvd
from collective.common import connection
from collective.common.exceptions import HorovodInternalError
from rank_tensors import DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, expected_reduction, rank_input

SHAPES = [(), (17,), (5, 3), (2, 3, 4)]


def _ranks():
    return list(range(hvd.size()))


def _ops_for(dtype):
    if dtype is torch.bool:
        return [hvd.Min, hvd.Max]
    return [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_allreduce_every_op_and_dtype(dtype):
    for op in _ops_for(dtype):
        for shape in SHAPES:
            tensor = rank_input(hvd.rank(), shape, dtype, op)
            before = tensor.clone()
            result = hvd.allreduce(tensor, op=op)
            expected = expected_reduction(_ranks(), shape, dtype, op)
            assert result.dtype == dtype and result.shape == tensor.shape
            assert torch.equal(result, expected), (op, shape)
            assert torch.equal(tensor, before), 'allreduce modified its input'


def test_allreduce_defaults_to_average():
    tensor = rank_input(hvd.rank(), (6,), torch.float64)
    assert torch.equal(hvd.allreduce(tensor),
                       expected_reduction(_ranks(), (6,), torch.float64, hvd.Average))


def test_allreduce_average_flag_is_deprecated_but_works():
    tensor = rank_input(hvd.rank(), (4,), torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        summed = hvd.allreduce(tensor, average=False)
        averaged = hvd.allreduce(tensor, average=True)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert torch.equal(summed, expected_reduction(_ranks(), (4,), torch.float32, hvd.Sum))
    assert torch.equal(averaged, expected_reduction(_ranks(), (4,), torch.float32, hvd.Average))
    with pytest.raises(ValueError, match='supersedes average'):
        hvd.allreduce(tensor, average=True, op=hvd.Sum)


@pytest.mark.parametrize('dtype', FLOAT_DTYPES + [torch.int32], ids=str)
def test_allreduce_scale_factors(dtype):
    prescale, postscale = (3.0, 0.5) if not dtype.is_floating_point else (0.5, 4.0)
    tensor = rank_input(hvd.rank(), (3, 5), dtype)
    for op in (hvd.Sum, hvd.Average):
        result = hvd.allreduce(tensor, op=op, prescale_factor=prescale, postscale_factor=postscale)
        assert torch.equal(result, expected_reduction(_ranks(), (3, 5), dtype, op, prescale,
                                                      postscale)), op


@pytest.mark.parametrize('dtype', NUMERIC_DTYPES, ids=str)
def test_allreduce_in_place(dtype):
    tensor = rank_input(hvd.rank(), (4, 3), dtype)
    result = hvd.allreduce_(tensor, op=hvd.Sum)
    assert result is tensor
    assert torch.equal(tensor, expected_reduction(_ranks(), (4, 3), dtype, hvd.Sum))


def test_allreduce_non_contiguous_input_and_in_place_target():
    base = rank_input(hvd.rank(), (4, 6), torch.float32)
    view = base.t()  # non-contiguous
    assert not view.is_contiguous()
    expected = expected_reduction(_ranks(), (4, 6), torch.float32, hvd.Sum).t()
    assert torch.equal(hvd.allreduce(view, op=hvd.Sum), expected)
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.equal(view, expected)
    assert torch.equal(base, expected.t()), 'the in-place result must land in the viewed storage'


def test_allreduce_async_and_poll():
    tensor = rank_input(hvd.rank(), (1000,), torch.float32)
    handle = hvd.allreduce_async(tensor, op=hvd.Max, name='async.max')
    deadline = time.monotonic() + 30
    while not hvd.poll(handle):
        assert time.monotonic() < deadline, 'allreduce_async never completed'
        time.sleep(0.001)  # polling back-off, not synchronisation: poll decides
    result = hvd.synchronize(handle)
    assert torch.equal(result, expected_reduction(_ranks(), (1000,), torch.float32, hvd.Max))
    assert hvd.synchronize(handle) is None, 'a handle is synchronized once'
    with pytest.raises(ValueError, match='not created or has been cleared'):
        hvd.poll(handle)


def test_allreduce_async_in_place():
    tensor = rank_input(hvd.rank(), (9,), torch.int64)
    handle = hvd.allreduce_async_(tensor, op=hvd.Sum)
    assert hvd.synchronize(handle) is tensor
    assert torch.equal(tensor, expected_reduction(_ranks(), (9,), torch.int64, hvd.Sum))


def test_many_outstanding_allreduces_complete_in_any_synchronize_order():
    count = 300  # far more than one fusion cycle's worth; the daemon fuses them
    tensors = [rank_input(hvd.rank(), (i % 7 + 1, 3), torch.float32, seed=i) for i in range(count)]
    handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f'many.{i}') for i, t in enumerate(tensors)]
    for i in reversed(range(count)):
        result = hvd.synchronize(handles[i])
        expected = sum(rank_input(r, (i % 7 + 1, 3), torch.float32, seed=i).double()
                       for r in range(hvd.size())).float()
        assert torch.equal(result, expected), i


@pytest.mark.parametrize('dtype', [torch.float32, torch.int32, torch.bfloat16], ids=str)
def test_grouped_allreduce(dtype):
    shapes = [(3,), (2, 5), (), (7, 1)]
    tensors = [rank_input(hvd.rank(), s, dtype, seed=i) for i, s in enumerate(shapes)]
    results = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    assert isinstance(results, list) and len(results) == len(shapes)
    for i, (shape, result) in enumerate(zip(shapes, results)):
        expected = sum(rank_input(r, shape, dtype, seed=i).double() for r in range(hvd.size()))
        assert torch.equal(result, expected.to(dtype)), i


def test_grouped_allreduce_async_and_in_place_forms():
    tensors = [rank_input(hvd.rank(), (4,), torch.float64, seed=i) for i in range(3)]
    expected = [sum(rank_input(r, (4,), torch.float64, seed=i) for r in range(hvd.size()))
                for i in range(3)]
    results = hvd.synchronize(hvd.grouped_allreduce_async(tensors, op=hvd.Sum, name='grp'))
    assert isinstance(results, tuple)  # as Horovod's synchronize returns
    assert all(torch.equal(a, b) for a, b in zip(results, expected))

    in_place = [t.clone() for t in tensors]
    returned = hvd.synchronize(hvd.grouped_allreduce_async_(in_place, op=hvd.Sum))
    assert all(a is b for a, b in zip(returned, in_place))
    assert all(torch.equal(a, b) for a, b in zip(in_place, expected))

    in_place = [t.clone() for t in tensors]
    assert isinstance(hvd.grouped_allreduce_(in_place, op=hvd.Average), tuple)
    # Average multiplies the sum by 1/size (in float64 here), as Horovod does.
    assert all(torch.equal(a, b * (1.0 / hvd.size())) for a, b in zip(in_place, expected))


def test_allreduce_with_fp16_compression():
    tensor = rank_input(hvd.rank(), (8,), torch.float32)
    result = hvd.allreduce(tensor, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert result.dtype == torch.float32
    assert torch.equal(result, expected_reduction(_ranks(), (8,), torch.float32, hvd.Sum))


def test_arena_buffer_is_a_tensor_the_daemon_reads_in_place():
    client = connection.current().client
    buffer = client.allocate(16 * 4)
    view = memoryview(buffer)
    assert (view.nbytes, view.readonly, buffer.nbytes) == (64, False, 64)
    tensor = torch.frombuffer(buffer, dtype=torch.float32)
    assert tensor.data_ptr() == buffer.address
    del buffer, view  # the tensor keeps the block alive
    tensor.fill_(hvd.rank() + 1)
    hvd.allreduce_(tensor, op=hvd.Sum, name='arena.buffer')
    assert tensor.tolist() == [hvd.size() * (hvd.size() + 1) / 2] * 16


def test_arena_refuses_what_cannot_fit():
    client = connection.current().client
    with pytest.raises(HorovodInternalError, match='do not fit'):
        client.allocate(client.arena_bytes + 1)


@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_sparse_allreduce_async(op):
    def sparse_input(rank):
        indices = torch.tensor([[rank % 3, 2, 2], [1, rank % 4, rank % 4]])  # a repeated index
        return torch.sparse_coo_tensor(indices, torch.tensor([1.0 + rank, 2.0, 0.5]), (3, 4))

    result = hvd.sparse_allreduce_async(sparse_input(hvd.rank()), name='sparse', op=op)()
    # Average divides every rank's values by the size, then sums them (as
    # Horovod's sparse allreduce does).
    divisor = hvd.size() if op == hvd.Average else 1
    expected = sum(sparse_input(r).coalesce().to_dense() / divisor for r in _ranks())
    assert result.is_sparse and result.is_coalesced()
    assert torch.equal(result.to_dense(), expected)
    with pytest.raises(NotImplementedError, match='Average or op=Sum'):
        hvd.sparse_allreduce_async(sparse_input(0), name='sparse.max', op=hvd.Max)
