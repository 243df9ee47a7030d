"""collective.mpi4torch's point-to-point functions: messages, tags, errors and adjoints."""

import pytest
import torch

import collective.mpi4torch as mpi4torch
from collective.common.exceptions import HorovodInternalError
from mpi4torch_checks import comm, gradcheck_each_rank, rank_data, upstream


def _right():
    return (comm.rank + 1) % comm.size


def _left():
    return (comm.rank - 1) % comm.size


def _ring(a, tag=0):
    """mpi4torch's Isend -> Recv -> Wait idiom: a+b with b received from the left."""
    handle = comm.Isend(a, _right(), tag)
    buffer = mpi4torch.JoinDummies(torch.empty_like(a), [handle.dummy])
    b = comm.Recv(buffer, _left(), tag)
    sent = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [b]))
    return mpi4torch.JoinDummies(a + b, [sent]), b


def test_ring_forward_and_backward():
    a = rank_data(comm.rank, (5,)).requires_grad_()
    result, b = _ring(a)
    assert torch.equal(b, rank_data(_left(), (5,)))
    (result * upstream(comm.rank, (5,))).sum().backward()
    # d/d a_r of sum_s W_s * (a_s + a_{s-1}) = W_r + W_{r+1}
    assert torch.allclose(a.grad, upstream(comm.rank, (5,)) + upstream(_right(), (5,)))


def test_nonblocking_exchange_as_mpi4torch_tests_it():
    tmp = rank_data(comm.rank, (1000,)).requires_grad_()
    req = comm.Isend(tmp, _right(), 0)
    req2 = comm.Irecv(mpi4torch.JoinDummies(torch.empty_like(tmp), [req.dummy]), _left(), 0)
    res = comm.Wait(mpi4torch.JoinDummiesHandle(req, [req2.dummy]))
    res2 = comm.Wait(mpi4torch.JoinDummiesHandle(req2, [res]))
    (res2 * comm.rank).sum().backward()
    assert torch.equal(tmp.grad, torch.full_like(tmp, float(_right())))


def test_wait_of_a_send_returns_the_tensor_sent():
    a = rank_data(comm.rank, (3,))
    handle = comm.Isend(a, _right(), 4)
    received = comm.Recv(torch.empty(3, dtype=torch.float64), _left(), 4)
    assert torch.equal(comm.Wait(handle), a)
    assert torch.equal(received, rank_data(_left(), (3,)))


def test_self_send():
    a = rank_data(comm.rank, (2, 3))
    handle = comm.Isend(a, comm.rank, 7)
    assert torch.equal(comm.Recv(torch.empty(2, 3, dtype=torch.float64), comm.rank, 7), a)
    comm.Wait(handle)


def test_self_send_backward():
    a = rank_data(comm.rank, (4,)).requires_grad_()
    handle = comm.Isend(a, comm.rank, 3)
    b = comm.Recv(mpi4torch.JoinDummies(torch.empty(4, dtype=torch.float64), [handle.dummy]),
                  comm.rank, 3)
    sent = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [b]))
    (mpi4torch.JoinDummies(b * b, [sent])).sum().backward()
    assert torch.allclose(a.grad, 2 * a.detach())


def test_messages_of_one_tag_arrive_in_order():
    count = 5
    handles = [comm.Isend(torch.tensor([float(i)]), _right(), 11) for i in range(count)]
    received = [comm.Recv(torch.empty(1), _left(), 11).item() for _ in range(count)]
    for handle in handles:
        comm.Wait(handle)
    assert received == [float(i) for i in range(count)]


def test_receives_match_by_tag():
    first = comm.Isend(torch.tensor([1.0]), _right(), 21)
    second = comm.Isend(torch.tensor([2.0, 2.0]), _right(), 22)
    # Received in the other order: the tags, not the order, pair them up.
    assert torch.equal(comm.Recv(torch.empty(2), _left(), 22), torch.tensor([2.0, 2.0]))
    assert torch.equal(comm.Recv(torch.empty(1), _left(), 21), torch.tensor([1.0]))
    comm.Wait(first)
    comm.Wait(second)


def test_integer_messages():
    a = torch.arange(6, dtype=torch.int64).reshape(2, 3) + comm.rank
    handle = comm.Isend(a, _right(), 5)
    received = comm.Recv(torch.empty(2, 3, dtype=torch.int64), _left(), 5)
    comm.Wait(handle)
    assert torch.equal(received, torch.arange(6).reshape(2, 3) + _left())


def test_blocking_send_and_receive_between_two_ranks(two_ranks):
    if comm.rank == 0:
        comm.Send(torch.tensor([3.0, 4.0]), 1, 30)
    elif comm.rank == 1:
        assert torch.equal(comm.Recv(torch.empty(2), 0, 30), torch.tensor([3.0, 4.0]))


def test_mismatched_receive_fails_on_both_sides(two_ranks):
    if comm.rank == 0:
        handle = comm.Isend(torch.ones(3), 1, 40)
        with pytest.raises(HorovodInternalError):
            comm.Wait(handle)
    elif comm.rank == 1:
        with pytest.raises(HorovodInternalError):
            comm.Recv(torch.empty(4), 0, 40)
    # Both sides go on: the next message of that pair gets through.
    if comm.rank == 0:
        comm.Send(torch.ones(2), 1, 40)
    elif comm.rank == 1:
        assert torch.equal(comm.Recv(torch.empty(2), 0, 40), torch.ones(2))


def test_round_trip_gradcheck():
    def there_and_back(x):
        handle = comm.Isend(x, _right(), 50)
        b = comm.Recv(mpi4torch.JoinDummies(torch.empty_like(x), [handle.dummy]), _left(), 50)
        sent = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [b]))
        handle = comm.Isend(b * 2, _left(), 51)
        c = comm.Recv(mpi4torch.JoinDummies(torch.empty_like(x), [handle.dummy]), _right(), 51)
        back = comm.Wait(mpi4torch.JoinDummiesHandle(handle, [c]))
        return mpi4torch.JoinDummies(c, [sent, back])

    gradcheck_each_rank(there_and_back, [rank_data(comm.rank, (3,)).requires_grad_()])


def test_dummy_used_elsewhere_detected():
    a = rank_data(comm.rank, (2,)).requires_grad_()
    handle = comm.Isend(a, comm.rank, 60)
    b = comm.Recv(torch.empty(2, dtype=torch.float64), comm.rank, 60)
    with pytest.raises(RuntimeError, match='used by something other than Wait'):
        comm.Wait(mpi4torch.WaitHandle([handle.dummy * 2]))
    comm.Wait(handle)
    assert torch.equal(b, a.detach())


def test_wait_handle_refused_twice():
    handle = comm.Isend(torch.ones(1), comm.rank, 61)
    comm.Recv(torch.empty(1), comm.rank, 61)
    comm.Wait(handle)
    with pytest.raises(RuntimeError, match='was waited for already'):
        comm.Wait(handle)


def test_tag_out_of_range_refused():
    with pytest.raises(ValueError, match='tag -1 is out of range'):
        comm.Isend(torch.ones(1), 0, -1)


def test_every_rank_ends_the_file_together():
    # The tests above end with messages each rank sends itself; a rank that is
    # through them would leave the job, ending it for ranks still at work (on
    # another node, whose daemon answers later): this file is run alone across
    # nodes (multinode_python_test), so its ranks end it together.
    total = comm.Allreduce(torch.ones(1), mpi4torch.MPI_SUM)
    assert total.item() == comm.size
