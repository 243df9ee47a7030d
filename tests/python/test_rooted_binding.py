"""collective._core's rooted collectives, reduce_async, gather_async and scatter_async, with
CPU torch tensors (the binding collective.mpi4torch builds on): the root gets the result, the
other ranks an empty one; in place at the root; uneven gathers and scatters with ranks of no
rows; arguments refused at the call (ValueError) and disagreements across ranks reported by
the daemon (HorovodInternalError), after which the job goes on."""

import pytest
import torch

import collective.torch as hvd
from collective import _core
from collective.common import connection
from collective.torch import tensor_args


def _client():
    return connection.current().client


def _into(result, like):
    """Copies a Result into a new tensor of `like`'s dtype and the result's shape."""
    out = torch.empty(list(result.shape), dtype=like.dtype)
    result.copy_to(out.data_ptr(), out.numel() * out.element_size())
    return out


def _rank_data(rank, shape, dtype=torch.float32):
    return (torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64)
            .reshape(shape) * (rank + 1) + rank).to(dtype)


@pytest.mark.parametrize('op,reference', [
    ('sum', lambda xs: sum(xs)),
    ('average', lambda xs: sum(xs) / len(xs)),
    ('min', lambda xs: torch.stack(xs).min(0).values),
    ('max', lambda xs: torch.stack(xs).max(0).values),
    ('product', lambda xs: torch.stack(xs).prod(0)),
])
def test_reduce_to_every_root(op, reference):
    size, rank = hvd.size(), hvd.rank()
    inputs = [_rank_data(r, (3, 2), torch.float64) for r in range(size)]
    for root in range(size):
        t = inputs[rank].clone()
        out = torch.full_like(t, -1.0)
        handle = _client().reduce_async(f'rb.reduce.{op}.{root}', tensor_args.arg(t),
                                        out.data_ptr(), _core.REDUCE_OPS[op], 1.0, 1.0, root, 0)
        result = _client().wait(handle)
        if rank == root:
            assert list(result.shape) == [3, 2]
            assert torch.allclose(out, reference(inputs))
        else:
            assert result.nbytes == 0
            assert torch.equal(out, torch.full_like(t, -1.0)), 'a non-root output is not written'
        result.release()


def test_reduce_in_place_with_scales_and_int_dtype():
    size, rank = hvd.size(), hvd.rank()
    t = torch.full((5,), rank + 1, dtype=torch.int32)
    handle = _client().reduce_async('rb.reduce.inplace', tensor_args.arg(t), t.data_ptr(),
                                    _core.REDUCE_OPS['sum'], 1.0, 1.0, 0, 0)
    _client().wait(handle).release()
    expected = size * (size + 1) // 2 if rank == 0 else rank + 1
    assert t.tolist() == [expected] * 5
    f = torch.ones(4)
    handle = _client().reduce_async('rb.reduce.scaled', tensor_args.arg(f), 0,
                                    _core.REDUCE_OPS['sum'], 2.0, 0.25, size - 1, 0)
    result = _client().wait(handle)
    if rank == size - 1:
        assert _into(result, f).tolist() == [size * 0.5] * 4
    else:
        assert result.nbytes == 0
    result.release()


def test_gather_uneven_rows_to_every_root():
    size, rank = hvd.size(), hvd.rank()
    rows = [0 if r == 1 else r + 2 for r in range(size)]
    for root in range(size):
        t = _rank_data(rank, (rows[rank], 3))
        handle = _client().gather_async(f'rb.gather.{root}', tensor_args.arg(t), root, 0)
        result = _client().wait(handle)
        if rank == root:
            expected = torch.cat([_rank_data(r, (rows[r], 3)) for r in range(size)])
            assert torch.equal(_into(result, t), expected)
        else:
            assert result.nbytes == 0 and list(result.shape) == [0, 3]
        result.release()


def test_gather_into_an_output_at_the_root():
    size, rank = hvd.size(), hvd.rank()
    t = torch.full((2,), float(rank), dtype=torch.float64)
    out = torch.empty(2 * size, dtype=torch.float64)
    handle = _client().gather_async('rb.gather.out', tensor_args.arg(t), 0, 0,
                                    output=out.data_ptr() if rank == 0 else 0,
                                    output_bytes=out.numel() * 8 if rank == 0 else 0)
    _client().wait(handle).release()
    if rank == 0:
        assert out.tolist() == [float(r) for r in range(size) for _ in range(2)]


def test_scatter_uneven_rows_from_every_root():
    size, rank = hvd.size(), hvd.rank()
    rows = [0 if (size > 2 and r == size - 1) else r + 1 for r in range(size)]
    total = sum(rows)
    for root in range(size):
        whole = _rank_data(root, (total, 2), torch.int64)
        t = whole if rank == root else torch.empty((0, 2), dtype=torch.int64)
        out = torch.empty((rows[rank], 2), dtype=torch.int64)
        handle = _client().scatter_async(f'rb.scatter.{root}', tensor_args.arg(t), rows[rank],
                                         root, 0, output=out.data_ptr(),
                                         output_bytes=out.numel() * 8)
        _client().wait(handle).release()
        first = sum(rows[:rank])
        assert torch.equal(out, whole[first:first + rows[rank]])
        # Without an output: a view of this rank's rows.
        handle = _client().scatter_async(f'rb.scatter.view.{root}', tensor_args.arg(t),
                                         rows[rank], root, 0)
        result = _client().wait(handle)
        assert list(result.shape) == [rows[rank], 2]
        assert torch.equal(_into(result, t), whole[first:first + rows[rank]])
        result.release()


def test_arguments_are_refused_at_the_call():
    t = torch.ones(4)
    size = hvd.size()
    with pytest.raises(ValueError, match='root rank'):
        _client().reduce_async('rb.bad', tensor_args.arg(t), 0, _core.REDUCE_OPS['sum'], 1.0,
                               1.0, size, 0)
    with pytest.raises(ValueError, match='adasum'):
        _client().reduce_async('rb.bad', tensor_args.arg(t), 0, _core.REDUCE_OPS['adasum'],
                               1.0, 1.0, 0, 0)
    with pytest.raises(ValueError, match='at least one dimension'):
        _client().gather_async('rb.bad', tensor_args.arg(torch.tensor(1.0)), 0, 0)
    with pytest.raises(ValueError, match='receive_rows -1 is negative'):
        _client().scatter_async('rb.bad', tensor_args.arg(t), -1, 0, 0)
    out = torch.empty(1)
    with pytest.raises(ValueError, match='the output holds 4 bytes; 2 rows need 8'):
        _client().scatter_async('rb.bad', tensor_args.arg(t), 2, 0, 0, output=out.data_ptr(),
                                output_bytes=4)


def test_disagreements_fail_every_rank_and_the_job_goes_on():
    size, rank = hvd.size(), hvd.rank()
    t = torch.ones(2, 2)
    handle = _client().reduce_async('rb.mismatch', tensor_args.arg(t), 0,
                                    _core.REDUCE_OPS['sum'], 1.0, 1.0,
                                    1 if rank == size - 1 else 0, 0)
    with pytest.raises(hvd.HorovodInternalError, match='Mismatched reduce root ranks'):
        _client().wait(handle)
    # Root 0 sends 10·size rows; the ranks ask for one each.
    source = torch.ones(10 * size, 2) if rank == 0 else torch.empty(0, 2)
    handle = _client().scatter_async('rb.mismatch.rows', tensor_args.arg(source), 1, 0, 0)
    with pytest.raises(hvd.HorovodInternalError, match='Mismatched scatter rows'):
        _client().wait(handle)
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [size] * 3
