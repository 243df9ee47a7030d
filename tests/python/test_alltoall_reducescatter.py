"""alltoall (even, explicit splits, received splits) and reducescatter (uneven rows, grouped)."""

import pytest
import torch

import collective.torch as hvd
from rank_tensors import DTYPES, expected_reduction, expected_rows, rank_input


def _tagged(sender, rows, trailing, dtype):
    """Rows whose first column says who sent them and where they were."""
    values = (torch.arange(rows).reshape((rows,) + (1,) * len(trailing)) + 10 * sender) % 100
    return values.expand((rows,) + trailing).contiguous().to(dtype) if dtype is not torch.bool \
        else (values.expand((rows,) + trailing) % 2 == 0).contiguous()


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_alltoall_even_split(dtype):
    size = hvd.size()
    for trailing in [(), (2, 3)]:
        tensor = _tagged(hvd.rank(), 2 * size, trailing, dtype)
        output = hvd.alltoall(tensor)
        assert isinstance(output, torch.Tensor), 'without splits, Horovod returns the tensor only'
        expected = torch.cat([_tagged(s, 2 * size, trailing, dtype)[2 * hvd.rank():2 * hvd.rank() + 2]
                              for s in range(size)])
        assert torch.equal(output, expected), trailing


def _splits(sender, size):
    return [(sender + receiver) % 3 for receiver in range(size)]  # zeros included


@pytest.mark.parametrize('as_tensor', [False, True], ids=['list', 'tensor'])
def test_alltoall_with_splits_returns_received_splits(as_tensor):
    size, rank = hvd.size(), hvd.rank()
    splits = _splits(rank, size)
    tensor = _tagged(rank, sum(splits), (3,), torch.float32)
    # Horovod takes int32 splits only (test_errors.py: other types are refused).
    given = torch.tensor(splits, dtype=torch.int32) if as_tensor else splits
    output, received = hvd.alltoall(tensor, splits=given)
    expected_received = [_splits(s, size)[rank] for s in range(size)]
    assert received.tolist() == expected_received
    assert received.dtype == torch.int32
    pieces = []
    for s in range(size):
        sent = _splits(s, size)
        start = sum(sent[:rank])
        pieces.append(_tagged(s, sum(sent), (3,), torch.float32)[start:start + sent[rank]])
    assert torch.equal(output, torch.cat(pieces))


def test_alltoall_async_returns_output_and_received_splits():
    size = hvd.size()
    tensor = _tagged(hvd.rank(), size, (), torch.int32)
    output, received = hvd.synchronize(hvd.alltoall_async(tensor, name='a2a.async'))
    assert received.tolist() == [1] * size
    assert torch.equal(output, torch.tensor([(hvd.rank() + 10 * s) % 100 for s in range(size)],
                                            dtype=torch.int32))


@pytest.mark.parametrize('dtype', [d for d in DTYPES if d is not torch.bool], ids=str)
def test_reducescatter_sum_and_average_uneven_rows(dtype):
    size, rank = hvd.size(), hvd.rank()
    for rows in [size * 2, size * 2 + 1, 1]:
        tensor = rank_input(rank, (rows, 3), dtype)
        start, count = expected_rows(rows, size, rank)
        for op in (hvd.Sum, hvd.Average):
            result = hvd.reducescatter(tensor, op=op)
            expected = expected_reduction(range(size), (rows, 3), dtype, op)[start:start + count]
            assert result.shape == (count, 3)
            assert torch.equal(result, expected), (rows, op)


def test_reducescatter_defaults_to_average_and_scales():
    size, rank = hvd.size(), hvd.rank()
    tensor = rank_input(rank, (2 * size,), torch.float64)
    start, count = expected_rows(2 * size, size, rank)
    assert torch.equal(hvd.reducescatter(tensor),
                       expected_reduction(range(size), (2 * size,), torch.float64,
                                          hvd.Average)[start:start + count])
    scaled = hvd.reducescatter(tensor, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.equal(scaled, expected_reduction(range(size), (2 * size,), torch.float64,
                                                  hvd.Sum, 0.5, 3.0)[start:start + count])


def test_grouped_and_async_reducescatter():
    size, rank = hvd.size(), hvd.rank()
    shapes = [(size, 2), (size + 1,), (3 * size, 1)]
    tensors = [rank_input(rank, s, torch.float32, seed=i) for i, s in enumerate(shapes)]
    handle = hvd.reducescatter_async(tensors[0], name='rs.async', op=hvd.Sum)
    grouped = hvd.grouped_reducescatter(tensors, op=hvd.Sum)
    grouped_async = hvd.synchronize(hvd.grouped_reducescatter_async(tensors, op=hvd.Sum))
    assert isinstance(grouped, list) and isinstance(grouped_async, tuple)  # Horovod's types
    single = hvd.synchronize(handle)
    for i, shape in enumerate(shapes):
        start, count = expected_rows(shape[0], size, rank)
        full = sum(rank_input(r, shape, torch.float32, seed=i).double() for r in range(size))
        expected = full.float()[start:start + count]
        assert torch.equal(grouped[i], expected), i
        assert torch.equal(grouped_async[i], expected), i
    assert torch.equal(single, grouped[0])


def test_reducescatter_refuses_min():
    # As Horovod: a RuntimeError (HorovodInternalError), in its words
    # (test_horovod_parity.py checks every refused op and form).
    with pytest.raises(RuntimeError, match='only supports AVERAGE and SUM'):
        hvd.reducescatter(torch.ones(hvd.size()), op=hvd.Min)
