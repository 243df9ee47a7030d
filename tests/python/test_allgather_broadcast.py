"""allgather (uneven first dimensions, grouped) and broadcast (every root, in place)."""

import pytest
import torch

import collective.torch as hvd
from rank_tensors import DTYPES, rank_input


def _rows(rank):
    return (rank * 2) % 5 + 1  # differs between ranks


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_allgather_every_dtype_with_uneven_rows(dtype):
    for trailing in [(), (3,), (2, 4)]:
        tensor = rank_input(hvd.rank(), (_rows(hvd.rank()),) + trailing, dtype)
        gathered = hvd.allgather(tensor)
        expected = torch.cat([rank_input(r, (_rows(r),) + trailing, dtype)
                              for r in range(hvd.size())])
        assert gathered.dtype == dtype
        assert torch.equal(gathered, expected), trailing


def test_allgather_rank_with_no_rows():
    rows = 0 if hvd.rank() == 0 else 2
    tensor = torch.full((rows, 3), float(hvd.rank()))
    gathered = hvd.allgather(tensor)
    expected = torch.cat([torch.full((0 if r == 0 else 2, 3), float(r))
                          for r in range(hvd.size())])
    assert torch.equal(gathered, expected)


def test_allgather_result_is_a_private_copy():
    first = hvd.allgather(torch.full((2,), float(hvd.rank())))
    snapshot = first.clone()
    # Later results reuse the daemon's result memory; the first must not change.
    for i in range(20):
        hvd.allgather(torch.full((64,), float(i)))
    first += 1  # and it is writable
    assert torch.equal(first, snapshot + 1)


def test_allgather_async_and_grouped():
    tensors = [rank_input(hvd.rank(), (_rows(hvd.rank()), k + 1), torch.float32, seed=k)
               for k in range(3)]
    handle = hvd.allgather_async(tensors[0], name='gather.async')
    grouped = hvd.grouped_allgather(tensors)
    grouped_async = hvd.synchronize(hvd.grouped_allgather_async(tensors, name='gather.grp'))
    # Horovod's types: tuples from grouped_allgather and from synchronize.
    assert isinstance(grouped, tuple) and isinstance(grouped_async, tuple)
    single = hvd.synchronize(handle)
    for k in range(3):
        expected = torch.cat([rank_input(r, (_rows(r), k + 1), torch.float32, seed=k)
                              for r in range(hvd.size())])
        assert torch.equal(grouped[k], expected)
        assert torch.equal(grouped_async[k], expected)
    assert torch.equal(single, grouped[0])


def test_allgather_non_contiguous_input():
    tensor = rank_input(hvd.rank(), (3, 4), torch.int64).t()
    gathered = hvd.allgather(tensor)
    expected = torch.cat([rank_input(r, (3, 4), torch.int64).t() for r in range(hvd.size())])
    assert torch.equal(gathered, expected)


def _roots():
    return sorted({0, hvd.size() - 1})


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_broadcast_every_dtype_and_root(dtype):
    for root in _roots():
        for shape in [(), (5,), (3, 4)]:
            tensor = rank_input(hvd.rank(), shape, dtype)
            before = tensor.clone()
            result = hvd.broadcast(tensor, root)
            assert torch.equal(result, rank_input(root, shape, dtype)), (root, shape)
            assert torch.equal(tensor, before), 'broadcast modified its input'


@pytest.mark.parametrize('root', [0, -1], ids=['first', 'last'])
def test_broadcast_in_place_and_async(root):
    root = root % hvd.size()
    tensor = rank_input(hvd.rank(), (6,), torch.float32)
    assert hvd.broadcast_(tensor, root) is tensor
    assert torch.equal(tensor, rank_input(root, (6,), torch.float32))

    tensor = rank_input(hvd.rank(), (6,), torch.int16)
    result = hvd.synchronize(hvd.broadcast_async(tensor, root, name='bcast.async'))
    assert torch.equal(result, rank_input(root, (6,), torch.int16))
    assert torch.equal(tensor, rank_input(hvd.rank(), (6,), torch.int16))

    assert hvd.synchronize(hvd.broadcast_async_(tensor, root)) is tensor
    assert torch.equal(tensor, rank_input(root, (6,), torch.int16))


def test_broadcast_in_place_non_contiguous():
    base = rank_input(hvd.rank(), (3, 5), torch.float64)
    view = base[:, 1:4]
    assert not view.is_contiguous()
    hvd.broadcast_(view, 0)
    assert torch.equal(view, rank_input(0, (3, 5), torch.float64)[:, 1:4])
    assert torch.equal(base[:, 0], rank_input(hvd.rank(), (3, 5), torch.float64)[:, 0]), \
        'columns outside the view must stay'
