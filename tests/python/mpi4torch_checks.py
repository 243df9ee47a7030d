"""Checks shared by the collective.mpi4torch tests: a distributed function against a
single-process reference, and gradcheck rank by rank.

Every rank can regenerate every rank's input (``rank_data``), so each rank
computes locally, with plain torch, what the collective must return on
every rank (``reference(inputs)`` -> one output per rank) and which gradient
its input must get when every rank r backpropagates its own upstream
gradient W_r: autograd through the reference gives it exactly, cross-rank
terms included.
"""

import torch

import collective.mpi4torch as mpi4torch

comm = mpi4torch.COMM_WORLD


def rank_data(rank, shape, seed=0, dtype=torch.float64):
    """Rank ``rank``'s input for a test: the same tensor on every process that asks."""
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)


def upstream(rank, shape, seed=0):
    """Rank ``rank``'s upstream gradient for an output of ``shape``."""
    return rank_data(rank, shape, seed=500 + seed)


def check_against_reference(function, reference, inputs, seed=0, device='cpu'):
    """``function(x)`` on this rank against ``reference(inputs)[rank]``, forward and backward.

    ``inputs``: every rank's input, by rank; this rank's goes to ``device``
    (the reference runs on the CPU). Returns this rank's output.
    """
    rank = comm.rank
    x = inputs[rank].clone().to(device).requires_grad_()
    y = function(x)
    assert y.device == x.device, (y.device, x.device)
    leaves = [t.clone().requires_grad_() for t in inputs]
    expected = reference(leaves)
    assert y.shape == expected[rank].shape, (y.shape, expected[rank].shape)
    assert torch.allclose(y.detach().cpu(), expected[rank].detach()), (y, expected[rank])
    (y * upstream(rank, y.shape, seed).to(device)).sum().backward()
    sum((out * upstream(r, out.shape, seed)).sum() for r, out in enumerate(expected)).backward()
    expected_grad = leaves[rank].grad
    if expected_grad is None:
        expected_grad = torch.zeros_like(leaves[rank])
    assert x.grad is not None, 'no gradient reached the input'
    assert torch.allclose(x.grad.cpu(), expected_grad), (x.grad, expected_grad)
    return y


def gradcheck_each_rank(function, inputs):
    """``torch.autograd.gradcheck`` of ``function`` (float64) once per rank k of the communicator.

    gradcheck perturbs the inputs of every rank at once and backpropagates
    the same unit vectors on every rank, which checks the Jacobian only for
    functions symmetric across ranks. So in round k only rank k's inputs
    and outputs count: the other ranks feed fixed values (their input times
    zero plus a constant) and return their outputs times zero, while still
    making every collective call, forward and backward, in step with rank k.
    Each round checks the block d(output_k)/d(input_k) numerically.
    """
    rank = comm.rank
    for k in range(comm.size):
        fixed = [x.detach().clone() for x in inputs]

        def masked(*xs):
            if rank != k:
                xs = [x * 0 + f for x, f in zip(xs, fixed)]
            outputs = function(*xs)
            if rank != k:
                if isinstance(outputs, tuple):
                    return tuple(o * 0 for o in outputs)
                return outputs * 0
            return outputs

        assert torch.autograd.gradcheck(masked, tuple(inputs)), f'round {k}'
