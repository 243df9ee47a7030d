"""Gradients of the differentiable collectives, with Horovod's definitions.

Each test gives every rank its own upstream gradient W_r (backward of
(y * W_r).sum()) and checks the input gradient against the definition,
computed locally from every rank's W. gradcheck applies where the function
is the same on every rank when all ranks perturb together: the allreduces.
"""

import pytest
import torch

import collective.torch as hvd
from rank_tensors import expected_rows


def _upstream(rank, shape):
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(shape, generator=generator, dtype=torch.float64)


def _leaf(rank, shape):
    generator = torch.Generator().manual_seed(200 + rank)
    return torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_()


def _backward(output, rank):
    (output * _upstream(rank, output.shape)).sum().backward()


@pytest.mark.parametrize('op,prescale,postscale', [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0),
                                                   (hvd.Sum, 0.5, 3.0)])
def test_allreduce_gradient(op, prescale, postscale):
    size, rank = hvd.size(), hvd.rank()
    x = _leaf(rank, (3, 4))
    _backward(hvd.allreduce(x, op=op, prescale_factor=prescale, postscale_factor=postscale), rank)
    upstream = sum(_upstream(r, (3, 4)) for r in range(size))
    if op == hvd.Average:
        upstream = upstream / size
    assert torch.allclose(x.grad, upstream * prescale * postscale)


def test_grouped_allreduce_gradient():
    size, rank = hvd.size(), hvd.rank()
    xs = [_leaf(rank, (2,)), _leaf(rank, (3, 1))]
    outputs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    (sum((y * _upstream(rank, y.shape) * (i + 1)).sum() for i, y in enumerate(outputs))).backward()
    for i, x in enumerate(xs):
        expected = sum(_upstream(r, x.shape) for r in range(size)) * (i + 1)
        assert torch.allclose(x.grad, expected), i


@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average])
def test_allreduce_gradcheck(op):
    x = _leaf(hvd.rank(), (4,))
    assert torch.autograd.gradcheck(
        lambda t: hvd.allreduce(t, op=op, prescale_factor=2.0, postscale_factor=0.25), (x,))
    ys = (_leaf(hvd.rank(), (2,)), _leaf(hvd.rank(), (3,)))
    assert torch.autograd.gradcheck(lambda a, b: tuple(hvd.grouped_allreduce([a, b], op=op)), ys)


def _rows(rank):
    return rank % 3 + 1


def test_allgather_gradient():
    size, rank = hvd.size(), hvd.rank()
    x = _leaf(rank, (_rows(rank), 2))
    gathered = hvd.allgather(x)
    total = sum(_rows(r) for r in range(size))
    assert gathered.shape == (total, 2)
    _backward(gathered, rank)
    averaged = sum(_upstream(r, (total, 2)) for r in range(size)) / size
    start = sum(_rows(r) for r in range(rank))
    assert torch.allclose(x.grad, averaged[start:start + _rows(rank)])


def test_grouped_allgather_gradient():
    size, rank = hvd.size(), hvd.rank()
    xs = [_leaf(rank, (_rows(rank),)), _leaf(rank, (1, 3))]
    outputs = hvd.grouped_allgather(xs)
    sum((y * _upstream(rank, y.shape)).sum() for y in outputs).backward()
    start = sum(_rows(r) for r in range(rank))
    first = sum(_upstream(r, outputs[0].shape) for r in range(size)) / size
    second = sum(_upstream(r, outputs[1].shape) for r in range(size)) / size
    assert torch.allclose(xs[0].grad, first[start:start + _rows(rank)])
    assert torch.allclose(xs[1].grad, second[rank:rank + 1])


@pytest.mark.parametrize('root', [0, -1], ids=['first', 'last'])
def test_broadcast_gradient(root):
    size, rank = hvd.size(), hvd.rank()
    root = root % size
    x = _leaf(rank, (5,))
    output = hvd.broadcast(x, root)
    assert torch.equal(output.detach(), _leaf(root, (5,)).detach())
    _backward(output, rank)
    if rank == root:
        expected = sum(_upstream(r, (5,)) for r in range(size)) / size
    else:
        expected = torch.zeros(5, dtype=torch.float64)
    assert torch.allclose(x.grad, expected)


def _splits(sender, size):
    return [(sender + receiver) % 3 + 1 for receiver in range(size)]


@pytest.mark.parametrize('with_splits', [False, True], ids=['even', 'splits'])
def test_alltoall_gradient(with_splits):
    size, rank = hvd.size(), hvd.rank()
    sent = [_splits(s, size) if with_splits else [2] * size for s in range(size)]
    x = _leaf(rank, (sum(sent[rank]), 3))
    if with_splits:
        output, received = hvd.alltoall(x, splits=sent[rank])
        assert not received.requires_grad
    else:
        output = hvd.alltoall(x)
    _backward(output, rank)
    # Row block j of x went to rank j, where it sits after what ranks < rank sent there.
    pieces = []
    for receiver in range(size):
        received_rows = [sent[s][receiver] for s in range(size)]
        upstream = _upstream(receiver, (sum(received_rows), 3))
        start = sum(received_rows[:rank])
        pieces.append(upstream[start:start + sent[rank][receiver]])
    assert torch.allclose(x.grad, torch.cat(pieces))


@pytest.mark.parametrize('op,prescale,postscale', [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0),
                                                   (hvd.Average, 2.0, 0.5)])
def test_reducescatter_gradient(op, prescale, postscale):
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    x = _leaf(rank, (rows, 2))
    output = hvd.reducescatter(x, op=op, prescale_factor=prescale, postscale_factor=postscale)
    _backward(output, rank)
    # Horovod: the allgathered gradient, times the size for Sum, times the scale factors.
    gathered = torch.cat([_upstream(r, (expected_rows(rows, size, r)[1], 2)) for r in range(size)])
    scale = (size if op == hvd.Sum else 1) * prescale * postscale
    assert torch.allclose(x.grad, gathered * scale)


def test_grouped_reducescatter_gradient():
    size, rank = hvd.size(), hvd.rank()
    xs = [_leaf(rank, (size,)), _leaf(rank, (size + 1, 2))]
    outputs = hvd.grouped_reducescatter(xs, op=hvd.Average)
    sum((y * _upstream(rank, y.shape)).sum() for y in outputs).backward()
    for x in xs:
        rows, trailing = x.shape[0], tuple(x.shape[1:])
        gathered = torch.cat([_upstream(r, (expected_rows(rows, size, r)[1],) + trailing)
                              for r in range(size)])
        assert torch.allclose(x.grad, gathered)


def test_in_place_forms_do_not_track_gradients():
    x = _leaf(hvd.rank(), (3,))
    y = x.detach().clone()
    assert hvd.allreduce_(y, op=hvd.Sum) is y and not y.requires_grad


def test_horovods_autograd_functions_take_horovods_arguments():
    # horovod.torch.mpi_ops.HorovodAllreduce.apply(tensor, average, name, op, prescale,
    # postscale, process_set), and the grouped form with the tensors last.
    size, rank = hvd.size(), hvd.rank()
    x = _leaf(rank, (3,))
    with pytest.warns(DeprecationWarning, match='average'):  # average=False: Sum
        y = hvd.mpi_ops.HorovodAllreduce.apply(x, False, 'horovod.apply', None, 1.0, 1.0,
                                               hvd.global_process_set)
    _backward(y, rank)
    assert torch.allclose(y, sum(_leaf(r, (3,)) for r in range(size)).detach())
    assert torch.allclose(x.grad, sum(_upstream(r, (3,)) for r in range(size)))
    (z,) = hvd.mpi_ops.HorovodGroupedAllreduce.apply(None, 'horovod.grouped', hvd.Average, 1.0,
                                                     1.0, hvd.global_process_set, x.detach())
    assert torch.allclose(z, sum(_leaf(r, (3,)) for r in range(size)).detach() / size)
    gathered = hvd.mpi_ops.HorovodAllgather.apply(x.detach(), 'horovod.gather',
                                                  hvd.global_process_set)
    assert gathered.shape == (3 * size,)
    assert hvd.mpi_ops.handle_average_backwards_compatibility(None, None) == hvd.Average
