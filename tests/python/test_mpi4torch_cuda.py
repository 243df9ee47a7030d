"""collective.mpi4torch on CUDA tensors: every function, forward and backward, results on the
tensor's device (the tensors travel through host memory, as in mpi4torch without CUDA-aware
MPI).

Needs a GPU: without one every test here is skipped, and reported as skipped. Run on a GPU
machine with
  collectiverun -np 2 python3 -m pytest -q -rs tests/python/test_mpi4torch_cuda.py
"""

import pytest
import torch

import collective.mpi4torch as mpi4torch
from mpi4torch_checks import check_against_reference, comm, rank_data

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason='needs a CUDA GPU: torch.cuda.is_available() is False on this machine')

_DEVICE = 'cuda'


def _inputs(shape_of_rank):
    return [rank_data(r, shape_of_rank(r)) for r in range(comm.size)]


def test_allreduce():
    check_against_reference(lambda x: comm.Allreduce(x, mpi4torch.MPI_SUM),
                            lambda xs: [sum(xs)] * len(xs), _inputs(lambda r: (3, 4)),
                            device=_DEVICE)


def test_bcast_writes_the_device_tensor():
    x = rank_data(comm.rank, (4,)).to(_DEVICE)
    y = comm.Bcast_(x, 0)
    assert x.device.type == 'cuda' and torch.equal(x.cpu(), rank_data(0, (4,)))
    assert torch.equal(y, x)
    check_against_reference(lambda t: comm.Bcast_(t * 1, 0), lambda xs: [xs[0] * 1] * len(xs),
                            _inputs(lambda r: (2, 3)), device=_DEVICE)


def test_reduce():
    def reference(xs):
        return [sum(xs) if r == 0 else 0 * sum(xs) for r in range(len(xs))]

    check_against_reference(lambda x: comm.Reduce_(x * 1, mpi4torch.MPI_SUM, 0), reference,
                            _inputs(lambda r: (2, 3)), device=_DEVICE)


def test_gather_and_scatter():
    def gathered(xs):
        return [torch.cat(xs, 1) if r == 0 else xs[r][:, :0] + 0 for r in range(len(xs))]

    check_against_reference(lambda x: comm.Gather(x, 1, 0), gathered,
                            _inputs(lambda r: (2, r + 1)), device=_DEVICE)
    counts = [r + 1 for r in range(comm.size)]
    inputs = [rank_data(r, (2, sum(counts)) if r == 0 else (1,)) for r in range(comm.size)]

    def scattered(xs):
        return [piece + 0 * xs[r].sum() for r, piece in enumerate(torch.split(xs[0], counts, 1))]

    check_against_reference(lambda x: comm.Scatter(x, 1, counts[comm.rank], 0), scattered,
                            inputs, device=_DEVICE)


def test_allgather_and_alltoall():
    check_against_reference(lambda x: comm.Allgather(x, 0),
                            lambda xs: [torch.cat(xs, 0)] * len(xs),
                            _inputs(lambda r: (r + 1, 2)), device=_DEVICE)
    size = comm.size

    def exchanged(xs):
        return [torch.cat([x[:, r:r + 1] for x in xs], 0) for r in range(len(xs))]

    check_against_reference(lambda x: comm.Alltoall(x, 0, 1, 1), exchanged,
                            _inputs(lambda r: (2, size)), device=_DEVICE)


def test_ring():
    a = rank_data(comm.rank, (3,)).to(_DEVICE).requires_grad_()
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    handle = comm.Isend(a, right, 0)
    buffer = mpi4torch.JoinDummies(torch.empty_like(a), [handle.dummy])
    b = comm.Recv(buffer, left, 0)
    sent = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [b]))
    assert b.device == a.device and torch.equal(b.cpu(), rank_data(left, (3,)))
    # The CUDA buffer holds what was received too, as with CUDA-aware MPI in mpi4torch.
    assert torch.equal(buffer.detach().cpu(), rank_data(left, (3,)))
    mpi4torch.JoinDummies(a + b, [sent]).sum().backward()
    assert a.grad.device == a.device
    assert torch.equal(a.grad.cpu(), torch.full((3,), 2.0, dtype=torch.float64))
