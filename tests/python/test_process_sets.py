"""Process sets: static (init(process_sets=...)) and dynamic, collectives within them, membership."""

import pytest
import torch

import collective.torch as hvd
from rank_tensors import expected_reduction, expected_rows, rank_input


def _my_set(static_process_sets):
    evens, odds = static_process_sets
    return evens if hvd.rank() % 2 == 0 else odds


def test_global_process_set():
    ps = hvd.global_process_set
    assert ps.process_set_id == 0
    assert ps.ranks == list(range(hvd.size()))
    assert ps.size() == hvd.size() and ps.rank() == hvd.rank() and ps.included()


def test_static_process_sets_are_registered(static_process_sets):
    evens, odds = static_process_sets
    size, rank = hvd.size(), hvd.rank()
    assert evens.ranks == list(range(0, size, 2)) and odds.ranks == list(range(1, size, 2))
    assert {evens.process_set_id, odds.process_set_id} == {1, 2}
    assert evens.size() == len(evens.ranks) and odds.size() == len(odds.ranks)
    mine, other = (evens, odds) if rank % 2 == 0 else (odds, evens)
    assert mine.included() and not other.included()
    assert mine.rank() == mine.ranks.index(rank)
    with pytest.raises(ValueError, match='not a member'):
        other.rank()
    assert 'process_set_id=' in str(mine)


def test_collectives_within_static_sets(static_process_sets):
    ps = _my_set(static_process_sets)
    rank, members = hvd.rank(), ps.ranks
    summed = hvd.allreduce(rank_input(rank, (4, 2), torch.float32), op=hvd.Sum, process_set=ps)
    assert torch.equal(summed, expected_reduction(members, (4, 2), torch.float32, hvd.Sum))

    grouped = hvd.grouped_allreduce([torch.full((3,), float(rank)), torch.ones(2)], op=hvd.Sum,
                                    process_set=ps)
    assert torch.equal(grouped[0], torch.full((3,), float(sum(members))))
    assert torch.equal(grouped[1], torch.full((2,), float(len(members))))

    gathered = hvd.allgather(torch.tensor([rank, rank]), process_set=ps)
    assert gathered.tolist() == [r for r in members for _ in range(2)]

    # root_rank is a global rank, as in Horovod.
    root = members[-1]
    assert hvd.broadcast(torch.tensor([float(rank)]), root, process_set=ps).item() == root

    output, received = hvd.alltoall(torch.full((len(members),), rank), splits=[1] * len(members),
                                    process_set=ps)
    assert output.tolist() == members and received.tolist() == [1] * len(members)

    rows = 2 * len(members) + 1
    start, count = expected_rows(rows, len(members), ps.rank())
    scattered = hvd.reducescatter(rank_input(rank, (rows,), torch.float64), op=hvd.Sum,
                                  process_set=ps)
    assert torch.equal(scattered, expected_reduction(members, (rows,), torch.float64,
                                                     hvd.Sum)[start:start + count])
    hvd.barrier(process_set=ps)


def test_non_members_are_refused(static_process_sets):
    evens, odds = static_process_sets
    other = odds if hvd.rank() % 2 == 0 else evens
    with pytest.raises(ValueError, match='not a member'):
        hvd.allreduce(torch.ones(2), process_set=other)
    with pytest.raises(ValueError, match='not a member'):
        hvd.allgather_async(torch.ones(2), process_set=other)
    with pytest.raises(ValueError, match='not a member'):
        hvd.reducescatter(torch.ones(2), process_set=other)
    with pytest.raises(ValueError, match='not a member'):
        hvd.barrier(process_set=other)
    mine = _my_set(static_process_sets)
    with pytest.raises(ValueError, match='not a member'):
        hvd.broadcast(torch.ones(2), other.ranks[0], process_set=mine)


def test_existing_sets_cannot_be_added_again(static_process_sets):
    with pytest.raises(ValueError, match='exists already'):
        hvd.add_process_set(list(static_process_sets[0].ranks))
    with pytest.raises(ValueError, match='global process set'):
        hvd.add_process_set(list(range(hvd.size())))
    assert not hvd.remove_process_set(hvd.global_process_set)


def test_dynamic_process_set_add_use_remove():
    size, rank = hvd.size(), hvd.rank()
    if size < 3:
        pytest.skip('with 2 ranks every subset exists already (global and static sets)')
    first = hvd.add_process_set([1, 0])
    second = hvd.add_process_set(hvd.ProcessSet(range(1, size)))
    assert first.ranks == [0, 1] and second.ranks == list(range(1, size))
    assert len({0, first.process_set_id, second.process_set_id}) == 3
    for ps in (first, second):
        if ps.included():
            result = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, process_set=ps)
            assert result.item() == sum(ps.ranks)
    removed_id = first.process_set_id
    assert hvd.remove_process_set(first)
    assert first.process_set_id is None and first.ranks == [0, 1]  # as in Horovod
    with pytest.raises(ValueError, match='not registered'):
        hvd.allreduce(torch.ones(1), process_set=first)
    stale = hvd.ProcessSet([0, 1])
    stale.process_set_id = removed_id  # what a stale copy of the object would send
    with pytest.raises(ValueError, match='does not exist'):
        hvd.allreduce(torch.ones(1), process_set=stale)
    assert hvd.remove_process_set(second)
    assert not hvd.remove_process_set(second), 'removing twice'
    # A removed set keeps its ranks and can be added again.
    assert hvd.add_process_set(first) is first and first.process_set_id is not None
    assert hvd.remove_process_set(first)


def test_process_set_needs_ranks():
    with pytest.raises(ValueError):
        hvd.ProcessSet('0,1')
    with pytest.raises(ValueError):
        hvd.ProcessSet([0, 1.5])
    assert hvd.ProcessSet([3, 1]).ranks == [1, 3]
    assert hvd.ProcessSet(ranks_or_comm=[2, 0]).ranks == [0, 2]  # Horovod's argument name
    assert hvd.ProcessSet([0]).size() is None, 'not registered yet'
    # Horovod answers membership from the ranks, registered or not.
    assert hvd.ProcessSet([0]).included() == (hvd.rank() == 0)
    assert hvd.ProcessSet([0]).mpi_comm is None and 'mpi_comm=None' in str(hvd.ProcessSet([0]))
