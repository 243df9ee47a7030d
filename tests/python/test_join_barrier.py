"""join (uneven data) and barrier."""

import os
import shutil
import tempfile
import time

import pytest
import torch

import collective.torch as hvd
from collective.common.exceptions import HorovodInternalError


def test_join_others_allreduce_with_zeros_from_the_joined_rank(two_ranks):
    size = hvd.size()
    if hvd.rank() == 0:
        last = hvd.join()
    else:
        summed = hvd.allreduce(torch.ones(4), op=hvd.Sum, name='join.sum')
        averaged = hvd.allreduce(torch.ones(4), op=hvd.Average, name='join.avg')
        assert summed.tolist() == [size - 1] * 4
        assert torch.allclose(averaged, torch.full((4,), (size - 1) / size))
        with pytest.raises(HorovodInternalError, match='joined'):
            hvd.allgather(torch.ones(1), name='join.gather')
        last = hvd.join()
    # Rank 0 joined before the others could finish their allreduces.
    assert last != 0
    assert hvd.allgather(torch.tensor([last])).tolist() == [last] * size
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [size] * 2


def test_each_rank_joins_in_turn_while_the_others_allgather_without_a_name(two_ranks):
    # Horovod's test_horovod_join_allgather, every rank joining once. The
    # joined rank makes one unnamed allgather fewer, so from the second turn
    # on the ranks at work disagree on its automatic name: the error must
    # reach every one of them all the same, and must not wait for the others.
    size = hvd.size()
    tensor = torch.ones(3, 2)
    for joining in range(size):
        if hvd.rank() != joining:
            with pytest.raises(HorovodInternalError) as refused:
                hvd.allgather(tensor)
            assert str(refused.value).endswith(
                f'cannot run while rank {joining} of process set 0 has joined: '
                'after a join only allreduce carries on'), str(refused.value)
        assert 0 <= hvd.join() < size
    # Each rank skipped one unnamed allgather: the names are in step again.
    gathered = hvd.allgather(torch.tensor([[hvd.rank()]]))
    assert gathered.flatten().tolist() == list(range(size))


def test_after_a_join_a_refused_collective_waits_for_no_agreement_on_its_name(two_ranks):
    # Each rank at work names its broadcast differently: once a rank has
    # joined, it fails at once all the same (across nodes too, where ranks
    # of one node that disagree on a name never make it ready there).
    size = hvd.size()
    if hvd.rank() != size - 1:
        with pytest.raises(HorovodInternalError) as refused:
            hvd.broadcast(torch.ones(2), 0, name=f'join.own.{hvd.rank()}')
        assert str(refused.value).endswith(
            f"broadcast of 'broadcast.join.own.{hvd.rank()}' cannot run while rank {size - 1} "
            'of process set 0 has joined: after a join only allreduce carries on'), \
            str(refused.value)
    assert hvd.join() >= 0


def test_unnamed_calls_agree_again_after_a_join(two_ranks):
    # Horovod's test_horovod_join_allgather as it is: rank 0 joins, the
    # others' unnamed allgather fails. Rank 0 made one unnamed call fewer;
    # the join ends with every rank counting on from the same number, so the
    # next unnamed call pairs up on every rank.
    if hvd.rank() != 0:
        with pytest.raises(HorovodInternalError, match='after a join only allreduce carries on'):
            hvd.allgather(torch.ones(2, 2))
    hvd.join()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).tolist() == [hvd.size()]


def test_join_with_a_single_rank_or_all_ranks_returns_a_rank():
    last = hvd.join(device=-1)
    assert 0 <= last < hvd.size()


def _shared_directory():
    """A directory made by rank 0, its path broadcast to every rank."""
    path = tempfile.mkdtemp(prefix='cpy-barrier-') if hvd.rank() == 0 else ''
    encoded = torch.zeros(256, dtype=torch.uint8)
    encoded[:len(path)] = torch.tensor(list(path.encode()), dtype=torch.uint8)
    hvd.broadcast_(encoded, 0)
    return bytes(encoded[encoded != 0].tolist()).decode()


def test_barrier_waits_for_every_rank():
    directory = _shared_directory()
    for round_ in range(3):
        with open(os.path.join(directory, f'{round_}.{hvd.rank()}'), 'w'):
            pass
        hvd.barrier()
        present = {name for name in os.listdir(directory) if name.startswith(f'{round_}.')}
        assert present == {f'{round_}.{r}' for r in range(hvd.size())}
    hvd.barrier()  # everyone has looked: rank 0 may clean up
    if hvd.rank() == 0:
        shutil.rmtree(directory)


def _await_file(path, deadline_s=60.0):
    """Polls until ``path`` exists; fails the test past the deadline."""
    deadline = time.monotonic() + deadline_s
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f'{path} did not appear within {deadline_s} s'
        time.sleep(0.001)


def _touch(path):
    with open(path, 'w'):
        pass


def test_a_process_set_barrier_waits_for_its_late_member(static_process_sets):
    # Horovod's test_process_set_barrier_op, without timing: sets of the
    # evens and the odds; in each set in turn the lowest rank arrives late,
    # only after the other set has run several barriers of its own, and the
    # set's other members must not leave before it arrived (it marks its
    # arrival in a shared directory just before its barrier call).
    directory = _shared_directory()
    evens, odds = static_process_sets
    mine = evens if evens.included() else odds
    for late_set, busy_set in ((evens, odds), (odds, evens)):
        tag = late_set.ranks[0]
        arrived = os.path.join(directory, f'{tag}.arrived')
        busy_done = os.path.join(directory, f'{tag}.busy_done')
        if mine is busy_set:
            for _ in range(5):
                hvd.barrier(process_set=busy_set)
            if hvd.rank() == busy_set.ranks[0]:
                _touch(busy_done)
        else:
            if hvd.rank() == tag:
                _await_file(busy_done)
                _touch(arrived)
            hvd.barrier(process_set=late_set)
            assert os.path.exists(arrived), \
                f'rank {hvd.rank()} left the barrier of {late_set.ranks} before rank {tag} arrived'
        hvd.barrier()
    if hvd.rank() == 0:
        shutil.rmtree(directory)
