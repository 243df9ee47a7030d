"""The collective.mpi4torch examples (examples/python) give the results they promise."""

import os
import sys

import torch

import collective.torch as hvd
from mpi4torch_checks import comm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                'examples', 'python'))

import mpi4torch_least_squares  # noqa: E402
import mpi4torch_ring  # noqa: E402


def test_least_squares_gradient_is_the_single_process_one():
    x, y = mpi4torch_least_squares.my_points(comm.rank, comm.size)
    params = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    loss = mpi4torch_least_squares.distributed_loss(params, comm, x, y)
    loss.backward()
    everything = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    all_x, all_y = mpi4torch_least_squares.all_points()
    single = torch.sum(torch.square(all_y - mpi4torch_least_squares.model(all_x, everything)))
    single.backward()
    assert torch.allclose(loss.detach(), single.detach())
    assert torch.allclose(params.grad, everything.grad)


def test_least_squares_fit_matches_the_single_process_solution():
    fitted = mpi4torch_least_squares.fit(comm)
    assert torch.allclose(fitted, mpi4torch_least_squares.single_process_solution(), rtol=0,
                          atol=1e-6)


def test_ring():
    res, grad = mpi4torch_ring.ring(comm)
    # A rank whose part is done may otherwise leave the job (the last test of
    # the file) while its neighbour's last receive still crosses nodes, which
    # fails that receive: the others stay until every rank has its result.
    hvd.barrier()
    left = (comm.rank - 1) % comm.size
    assert res.item() == 2.0 + comm.rank + left
    assert grad.item() == 2.0
