"""A distributed least-squares fit with collective.mpi4torch, whose gradient comes from
Allreduce's adjoint.

Every rank holds its share of the points of a noisy quadratic; the model is
a polynomial of degree 2 (three coefficients), fitted by minimizing the sum
of squared residuals over all points. The loss averages the parameters of
every rank (one Allreduce) and sums the ranks' local losses (another): torch's
own backward then gives every rank the gradient of the global loss, since
the adjoint of an Allreduce(MPI_SUM) is an Allreduce(MPI_SUM). The fit must
match the least-squares solution of all points in one process.

    collectiverun -np 3 python3 examples/python/mpi4torch_least_squares.py
"""

import torch

import collective.mpi4torch as mpi4torch

POINTS = 1000
TRUE_COEFFICIENTS = torch.tensor([0.1, 1.0, -2.0], dtype=torch.float64)


def all_points():
    """Every point of the problem (the same on every rank: a fixed seed)."""
    generator = torch.Generator().manual_seed(42)
    x = 2.0 * torch.rand(POINTS, generator=generator, dtype=torch.float64)
    noise = 0.01 * torch.randn(POINTS, generator=generator, dtype=torch.float64)
    return x, model(x, TRUE_COEFFICIENTS) + noise


def my_points(rank, size):
    """This rank's share: contiguous, the first (POINTS mod size) ranks one point more."""
    x, y = all_points()
    count = POINTS // size + (1 if rank < POINTS % size else 0)
    start = rank * (POINTS // size) + min(rank, POINTS % size)
    return x[start:start + count], y[start:start + count]


def model(x, coefficients):
    return (coefficients[2] * x + coefficients[1]) * x + coefficients[0]


def distributed_loss(params, comm, x, y):
    """The sum of squared residuals over every rank's points, the same on every rank."""
    params = comm.Allreduce(params, mpi4torch.MPI_SUM) / comm.size
    local = torch.sum(torch.square(y - model(x, params)))
    return comm.Allreduce(local, mpi4torch.MPI_SUM)


def fit(comm=mpi4torch.COMM_WORLD):
    """The coefficients fitted on every rank's points, through collectived."""
    x, y = my_points(comm.rank, comm.size)
    params = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([params], lr=1, max_iter=100, tolerance_grad=1e-12,
                                  tolerance_change=1e-15, line_search_fn='strong_wolfe')

    def closure():
        optimizer.zero_grad()
        loss = distributed_loss(params, comm, x, y)
        loss.backward()
        return loss

    optimizer.step(closure)
    return params.detach()


def single_process_solution():
    """The least-squares coefficients of all points, solved directly in this process."""
    x, y = all_points()
    design = torch.stack([torch.ones_like(x), x, x * x], dim=1)
    return torch.linalg.lstsq(design, y.unsqueeze(1)).solution.squeeze(1)


def main():
    comm = mpi4torch.COMM_WORLD
    fitted = fit(comm)
    expected = single_process_solution()
    if comm.rank == 0:
        print(f'fitted on {comm.size} ranks: {fitted.tolist()}')
        print(f'single process:      {expected.tolist()}')
    if not torch.allclose(fitted, expected, rtol=0, atol=1e-6):
        raise SystemExit(f'rank {comm.rank}: the distributed fit {fitted.tolist()} differs from '
                         f'the single-process solution {expected.tolist()}')
    if comm.rank == 0:
        print('the distributed fit matches the single-process solution')


if __name__ == '__main__':
    main()
