"""mpi4torch's Isend -> Recv -> Wait ring with collective.mpi4torch, differentiated.

Each rank sends its value a to the right and receives b from the left;
res = a + b. JoinDummies tells autograd what it cannot see: the receive
buffer depends on the send having started, the Wait on the receive, and
the result on the Wait. Summed over all ranks, each a appears twice (in its
own res and in the right neighbour's), so every a's gradient is 2.

    collectiverun -np 4 python3 examples/python/mpi4torch_ring.py
"""

import torch

import collective.mpi4torch as mpi4torch


def ring(comm=mpi4torch.COMM_WORLD):
    """(res, a.grad) on this rank."""
    a = torch.tensor([1.0 + comm.rank], dtype=torch.float64).requires_grad_()
    handle = comm.Isend(a, (comm.rank + 1) % comm.size, 0)
    receive_buffer = mpi4torch.JoinDummies(torch.empty_like(a), [handle.dummy])
    b = comm.Recv(receive_buffer, (comm.rank - 1 + comm.size) % comm.size, 0)
    wait_ret = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [b]))
    res = mpi4torch.JoinDummies(a + b, [wait_ret])
    res.backward()
    return res.detach(), a.grad


def main():
    comm = mpi4torch.COMM_WORLD
    res, grad = ring(comm)
    left = (comm.rank - 1 + comm.size) % comm.size
    print(f'rank {comm.rank}: res {res.item()} (expected {2.0 + comm.rank + left}), '
          f'a.grad {grad.item()} (expected 2.0)')
    if res.item() != 2.0 + comm.rank + left or grad.item() != 2.0:
        raise SystemExit(f'rank {comm.rank}: wrong ring result')


if __name__ == '__main__':
    main()
