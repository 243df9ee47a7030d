"""Names of requests: a name in use is refused at the call, with Horovod's ValueError, until
its handle is synchronized; unnamed calls never collide."""

import itertools
import threading
import time

import pytest
import torch

import collective.torch as hvd
from collective.common import connection
from collective.torch import handles

# Horovod 0.28.1's text (DUPLICATE_NAME_ERROR), raised as ValueError by the call.
HOROVOD_DUPLICATE_NAME = (
    'Requested to allreduce, allgather, or broadcast a tensor with the same name as another '
    'tensor that is currently being processed.  If you want to request another tensor, use a '
    'different tensor name.')


def _every_rank(make):
    return [make(r) for r in range(hvd.size())]


def _value(rank):
    return torch.arange(4, dtype=torch.float64) + 10 * rank


def _sum():
    return sum(_every_rank(_value))


def _rows(rank):
    return torch.full((rank + 1, 2), float(rank))


def _own_block(total):
    size, rank = hvd.size(), hvd.rank()
    rows = total.shape[0] // size
    return total[rank * rows:(rank + 1) * rows]


def _by_rows():
    return torch.arange(2 * hvd.size(), dtype=torch.float64) + 100 * hvd.rank()


def _alltoall_expected():
    size, rank = hvd.size(), hvd.rank()
    return torch.cat([(torch.arange(2 * size, dtype=torch.float64) + 100 * s)[2 * rank:2 * rank + 2]
                      for s in range(size)])


def _scattered():
    return _own_block(sum(torch.arange(2 * hvd.size(), dtype=torch.float64) + 100 * r
                          for r in range(hvd.size())))


# kind -> (start the call under `name`, what its synchronize must return)
_CALLS = {
    'allreduce_async': (
        lambda name: hvd.allreduce_async(_value(hvd.rank()), name=name, op=hvd.Sum),
        lambda result: torch.equal(result, _sum())),
    'allreduce_async_': (
        lambda name: hvd.allreduce_async_(_value(hvd.rank()), name=name, op=hvd.Sum),
        lambda result: torch.equal(result, _sum())),
    # A strided tensor takes the general path (a contiguous CPU one the short
    # one, async_ops._allreduce_start).
    'allreduce_async_strided': (
        lambda name: hvd.allreduce_async(_non_contiguous(_value(hvd.rank())), name=name,
                                         op=hvd.Sum),
        lambda result: torch.equal(result, _sum())),
    'allreduce_async__strided': (
        lambda name: hvd.allreduce_async_(_non_contiguous(_value(hvd.rank())), name=name,
                                          op=hvd.Sum),
        lambda result: torch.equal(result, _sum()) and not result.is_contiguous()),
    'grouped_allreduce_async': (
        lambda name: hvd.grouped_allreduce_async([_value(hvd.rank()), _value(hvd.rank())[:2]],
                                                 name=name, op=hvd.Sum),
        lambda result: torch.equal(result[0], _sum()) and torch.equal(result[1], _sum()[:2])),
    'grouped_allreduce_async_': (
        lambda name: hvd.grouped_allreduce_async_([_value(hvd.rank())], name=name, op=hvd.Sum),
        lambda result: torch.equal(result[0], _sum())),
    'allgather_async': (
        lambda name: hvd.allgather_async(_rows(hvd.rank()), name=name),
        lambda result: torch.equal(result, torch.cat(_every_rank(_rows)))),
    'grouped_allgather_async': (
        lambda name: hvd.grouped_allgather_async([_rows(hvd.rank())], name=name),
        lambda result: torch.equal(result[0], torch.cat(_every_rank(_rows)))),
    'broadcast_async': (
        lambda name: hvd.broadcast_async(_value(hvd.rank()), root_rank=0, name=name),
        lambda result: torch.equal(result, _value(0))),
    'broadcast_async_': (
        lambda name: hvd.broadcast_async_(_value(hvd.rank()), root_rank=0, name=name),
        lambda result: torch.equal(result, _value(0))),
    'alltoall_async': (
        lambda name: hvd.alltoall_async(_by_rows(), name=name),
        lambda result: torch.equal(result[0], _alltoall_expected())),
    'reducescatter_async': (
        lambda name: hvd.reducescatter_async(_by_rows(), name=name, op=hvd.Sum),
        lambda result: torch.equal(result, _scattered())),
    'grouped_reducescatter_async': (
        lambda name: hvd.grouped_reducescatter_async([_by_rows()], name=name, op=hvd.Sum),
        lambda result: torch.equal(result[0], _scattered())),
}


def _wait_until_complete(handle, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not hvd.poll(handle):
        assert time.monotonic() < deadline, f'the first call did not complete in {timeout_s} s'
        time.sleep(0.001)


def _ranks_in_step():
    # Unnamed: pairs up only if every rank made the same calls before.
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [hvd.size()] * 3


@pytest.mark.parametrize('kind', sorted(_CALLS))
def test_second_call_under_a_name_in_use_raises_at_the_call(kind):
    start, correct = _CALLS[kind]
    name = f'names.{kind}'
    first = start(name)
    # Completed but not synchronized: the name is still in use, on every
    # rank alike, however the ranks are timed.
    _wait_until_complete(first)
    with pytest.raises(ValueError) as refused:
        start(name)
    assert str(refused.value) == HOROVOD_DUPLICATE_NAME
    assert correct(hvd.synchronize(first))
    # Synchronized: the name is free again.
    assert correct(hvd.synchronize(start(name)))
    _ranks_in_step()


def _non_contiguous(tensor):
    """``tensor``'s values in a strided view: the general path's case (a contiguous CPU tensor
    takes allreduce's short ones, async_ops.allreduce_now and async_ops._allreduce_start)."""
    holder = torch.zeros(tensor.numel(), 2, dtype=tensor.dtype)
    holder[:, 0] = tensor.reshape(-1)
    view = holder[:, 0]
    assert not view.is_contiguous()
    return view


@pytest.mark.parametrize('call', ['allreduce', 'allreduce_'])
@pytest.mark.parametrize('contiguous', [True, False], ids=['short_path', 'general_path'])
def test_a_synchronous_allreduce_under_a_name_in_use_raises_at_the_call(call, contiguous):
    first = hvd.allreduce_async(_value(hvd.rank()), name='names.sync', op=hvd.Sum)
    _wait_until_complete(first)
    second = _value(hvd.rank()) if contiguous else _non_contiguous(_value(hvd.rank()))
    with pytest.raises(ValueError) as refused:
        getattr(hvd, call)(second, name='names.sync', op=hvd.Sum)
    assert str(refused.value) == HOROVOD_DUPLICATE_NAME
    assert torch.equal(second, _value(hvd.rank())), 'the refused call changed its tensor'
    assert torch.equal(hvd.synchronize(first), _sum())
    # The refused call did not take the name: it is free once the first is synchronized.
    assert torch.equal(getattr(hvd, call)(second, name='names.sync', op=hvd.Sum), _sum())
    _ranks_in_step()


def test_unnamed_allreduces_pair_up_whichever_path_each_rank_takes():
    # Contiguous tensors take the short paths, strided ones the general path;
    # both count the unnamed calls alike, so the n-th call of every rank
    # meets the n-th of the others whichever path each rank took.
    for step in range(4):
        own = _value(hvd.rank())
        short = (hvd.rank() + step) % 2 == 0
        in_place = own.clone() if short else _non_contiguous(own)
        assert torch.equal(hvd.allreduce_(in_place, op=hvd.Sum), _sum()), step
        new = own if short else _non_contiguous(own)
        assert torch.equal(hvd.allreduce(new, op=hvd.Max), _value(hvd.size() - 1)), step
        started = own.clone() if short else _non_contiguous(own)
        handle = hvd.allreduce_async_(started, op=hvd.Sum)
        assert hvd.synchronize(handle) is started, step
        assert torch.equal(started, _sum()), step
        assert torch.equal(hvd.synchronize(hvd.allreduce_async(new, op=hvd.Min)), _value(0)), step
    _ranks_in_step()


def test_name_outstanding_on_one_rank_only_is_refused_there(two_ranks):
    # Rank 0's first 'dup' stays outstanding until the others submit theirs,
    # which they do only after the barrier that rank 0 reaches after its check.
    if hvd.rank() == 0:
        handle = hvd.allreduce_async(torch.ones(2), name='dup', op=hvd.Sum)
        with pytest.raises(ValueError, match='same name as another tensor'):
            hvd.allreduce_async(torch.ones(2), name='dup', op=hvd.Sum)
        hvd.barrier()
    else:
        hvd.barrier()
        handle = hvd.allreduce_async(torch.ones(2), name='dup', op=hvd.Sum)
    assert hvd.synchronize(handle).tolist() == [hvd.size()] * 2
    assert hvd.allreduce(torch.ones(2), name='dup', op=hvd.Sum).tolist() == [hvd.size()] * 2


def test_a_name_is_in_use_across_kinds_only_under_the_same_full_name():
    # As in Horovod, the kind is part of the name: allreduce 'x' and
    # allgather 'x' are 'allreduce.x' and 'allgather.x'.
    reduced = hvd.allreduce_async(torch.ones(2), name='names.kinds', op=hvd.Sum)
    gathered = hvd.allgather_async(torch.ones(1), name='names.kinds')
    assert hvd.synchronize(reduced).tolist() == [hvd.size()] * 2
    assert hvd.synchronize(gathered).tolist() == [1.0] * hvd.size()


def test_failed_call_frees_its_name(two_ranks):
    with pytest.raises(hvd.HorovodInternalError, match='Mismatched'):
        hvd.allreduce(torch.ones(2 + (hvd.rank() == 0)), name='names.failed')
    assert hvd.allreduce(torch.ones(2), name='names.failed', op=hvd.Sum).tolist() == \
        [hvd.size()] * 2


def test_unnamed_calls_on_different_sets_do_not_collide(static_process_sets):
    evens, odds = static_process_sets
    mine = evens if evens.included() else odds
    # Every rank starts both counters at the same number, so that the calls
    # below are the n-th unnamed call of both sets at once.
    counters = connection.current().unnamed_calls
    counters[hvd.global_process_set.process_set_id] = itertools.count(10 ** 6)
    counters[mine.process_set_id] = itertools.count(10 ** 6)
    on_set = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, process_set=mine)
    on_job = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
    assert hvd.synchronize(on_job).tolist() == [hvd.size()] * 2
    assert hvd.synchronize(on_set).tolist() == [len(mine.ranks)] * 2


def test_one_name_on_two_sets_at_once(static_process_sets):
    # As in Horovod, whose sets queue their tensors apart: a name in use on
    # one set is free on another; on the same set it is still refused.
    evens, odds = static_process_sets
    mine = evens if evens.included() else odds
    on_set = hvd.allreduce_async(torch.ones(2), name='names.shared', op=hvd.Sum,
                                 process_set=mine)
    on_job = hvd.allreduce_async(torch.ones(2), name='names.shared', op=hvd.Sum)
    with pytest.raises(ValueError) as refused:
        hvd.allreduce_async(torch.ones(2), name='names.shared', op=hvd.Sum, process_set=mine)
    assert str(refused.value) == HOROVOD_DUPLICATE_NAME
    assert hvd.synchronize(on_job).tolist() == [hvd.size()] * 2
    assert hvd.synchronize(on_set).tolist() == [len(mine.ranks)] * 2


def test_optimizer_load_state_dict_mid_flight_frees_the_names(two_ranks):
    model = torch.nn.Linear(3, 1).double()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    state = optimizer.state_dict()
    model(torch.ones(2, 3, dtype=torch.float64)).sum().backward()  # hooks submit
    optimizer.load_state_dict(state)  # waits for the allreduces in flight, drops them
    optimizer.zero_grad()
    model(torch.ones(2, 3, dtype=torch.float64)).sum().backward()  # the same names again
    optimizer.step()
    assert model.weight.grad.tolist() == [[2.0] * 3]  # the average of equal gradients
    _ranks_in_step()


class _IdsTakenTogether:
    """Handle ids that each thread gets only once all ``threads`` have asked for one: every
    thread's claim is then under way at once, whatever the interpreter's switching."""

    def __init__(self, ids, threads):
        self._ids = ids
        self._together = threading.Barrier(threads)

    def __next__(self):
        taken = next(self._ids)
        self._together.wait(timeout=60)
        return taken


def test_of_threads_calling_under_one_name_at_once_exactly_one_gets_it(monkeypatch):
    # Hooks of a backward pass submit from autograd's threads: of calls under one name that
    # are all between the name's check and its claim at once, one runs, the rest are refused.
    threads = 4
    current = connection.current()
    monkeypatch.setattr(current, 'handle_ids', _IdsTakenTogether(current.handle_ids, threads))
    outcomes = []

    def call():
        try:
            outcomes.append(hvd.allreduce_async_(torch.ones(2), name='names.race', op=hvd.Sum))
        except ValueError as refused:
            outcomes.append(refused)

    racers = [threading.Thread(target=call) for _ in range(threads)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=60)
    monkeypatch.undo()
    refusals = [o for o in outcomes if isinstance(o, ValueError)]
    assert len(outcomes) == threads and len(refusals) == threads - 1, outcomes
    assert all(str(r) == HOROVOD_DUPLICATE_NAME for r in refusals)
    started, = (o for o in outcomes if not isinstance(o, ValueError))
    # Every rank started one call under the name: they pair up.
    assert hvd.synchronize(started).tolist() == [hvd.size()] * 2
    _ranks_in_step()


def test_a_refused_claim_of_several_names_holds_none_of_them():
    current = connection.current()
    held = [(0, 'names.claim.b')]
    holder = handles._claim_names(current, held)
    wanted = [(0, 'names.claim.a'), (0, 'names.claim.b'), (0, 'names.claim.c')]
    with pytest.raises(ValueError):
        handles._claim_names(current, wanted)
    assert current.names_in_use.get((0, 'names.claim.b')) == holder
    assert (0, 'names.claim.a') not in current.names_in_use
    assert (0, 'names.claim.c') not in current.names_in_use
    handles._free_names(current, holder, held)
    handles._free_names(current, handles._claim_names(current, wanted), wanted)
    assert not any(name.startswith('names.claim.') for _, name in current.names_in_use)
