"""hvd.empty and hvd.zeros: tensors in the client's shared-memory arena, which collectives
read where they are (nothing copied in), with the same results as ordinary tensors; and
hvd.to_arena, which moves existing tensors there, each staying the same object."""

import gc

import pytest
import torch

import collective.torch as hvd
from collective.common import connection


def _free_bytes():
    return connection.current().client.arena_free_bytes


def test_zeros_and_empty_make_arena_tensors_of_the_asked_shape_and_dtype():
    t = hvd.zeros(3, 4, dtype=torch.float64)
    assert t.shape == (3, 4) and t.dtype == torch.float64 and t.device.type == 'cpu'
    assert t.tolist() == [[0.0] * 4] * 3
    assert hvd.empty((2, 5)).dtype == torch.get_default_dtype()
    assert hvd.empty([0, 7]).shape == (0, 7)
    with pytest.raises(ValueError, match='non-negative integers'):
        hvd.empty(-1)


def test_an_arena_tensor_is_read_in_place_and_holds_its_block():
    nbytes = 1 << 20
    before = _free_bytes()
    tensor = hvd.zeros(nbytes // 4).add_(hvd.rank() + 1)
    # Its block is taken from the arena for as long as the tensor lives.
    assert _free_bytes() <= before - nbytes
    held = _free_bytes()
    # In flight and not yet waited for, an ordinary tensor's copy holds arena
    # space; the arena tensor takes none: it is read where it is.
    arena_handle = hvd.allreduce_async_(tensor, op=hvd.Sum, name='arena.in_place')
    assert _free_bytes() == held
    plain = torch.full((nbytes // 4,), float(hvd.rank() + 1))
    plain_handle = hvd.allreduce_async(plain, op=hvd.Sum, name='arena.copied')
    assert _free_bytes() <= held - nbytes
    total = float(sum(range(1, hvd.size() + 1)))
    assert hvd.synchronize(arena_handle) is tensor
    assert torch.equal(tensor, torch.full_like(tensor, total))
    assert torch.equal(hvd.synchronize(plain_handle), tensor)
    del tensor, plain
    assert _free_bytes() >= before - 4096  # the block went back with the tensor


@pytest.mark.parametrize('strided', [False, True], ids=['short_path', 'general_path'])
def test_an_allreduce_in_flight_holds_the_block_of_an_input_the_caller_dropped(strided):
    nbytes = 1 << 20
    before = _free_bytes()

    def dropped_input():
        if strided:  # a strided view takes the general path
            return hvd.zeros(nbytes // 4, 2)[:, 0].add_(hvd.rank() + 1)
        return hvd.zeros(nbytes // 4).add_(hvd.rank() + 1)

    handle = hvd.allreduce_async(dropped_input(), op=hvd.Sum, name=f'arena.dropped.{strided}')
    # Until synchronize the handle holds the input's block: nothing else can
    # take it and write there before the daemon has read it.
    assert _free_bytes() <= before - nbytes
    scribbled = hvd.empty(nbytes // 4 * (2 if strided else 1)).fill_(-7.0)
    total = float(sum(range(1, hvd.size() + 1)))
    assert torch.equal(hvd.synchronize(handle), torch.full((nbytes // 4,), total))
    del scribbled
    assert _free_bytes() >= before - 4096  # the input's block went back with the handle


def test_arena_tensors_in_every_collective():
    rank, size = hvd.rank(), hvd.size()
    rows = hvd.empty(rank + 1, 2, dtype=torch.int32)
    rows.fill_(rank)
    gathered = hvd.allgather(rows, name='arena.allgather')
    assert gathered.tolist() == [[r, r] for r in range(size) for _ in range(r + 1)]
    source = hvd.zeros(6, dtype=torch.float32).add_(rank)
    hvd.broadcast_(source, root_rank=size - 1, name='arena.broadcast')
    assert source.tolist() == [float(size - 1)] * 6
    view = hvd.zeros(8)[2:6].add_(1)  # a view of an arena tensor lies in the arena too
    assert hvd.allreduce(view, op=hvd.Sum, name='arena.view').tolist() == [float(size)] * 4


def _copied_out_bytes():
    return connection.current().client.copied_out_bytes


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int32, torch.int64, torch.uint8])
def test_in_place_allreduce_of_arena_tensors_needs_no_copy_out(dtype):
    rank, size = hvd.rank(), hvd.size()
    count = 4099  # a few vector widths and a tail
    arena = [hvd.zeros(count, dtype=dtype).add_(rank + 1 + i) for i in range(3)]
    plain = [torch.zeros(count, dtype=dtype).add_(rank + 1 + i) for i in range(3)]
    # The daemon writes an arena tensor's result into it: nothing is copied
    # out of its result segment, singly or as a group (which it fuses), on
    # one node or across nodes.
    nbytes = 3 * count * plain[0].element_size()
    copied = _copied_out_bytes()
    hvd.allreduce_(arena[0], op=hvd.Sum, name=f'arena.out.one.{dtype}')
    hvd.grouped_allreduce_(arena[1:], op=hvd.Sum, name=f'arena.out.group.{dtype}')
    assert _copied_out_bytes() == copied
    copied = _copied_out_bytes()
    # An ordinary tensor's result is copied out: the same bits.
    hvd.allreduce_(plain[0], op=hvd.Sum, name=f'plain.out.one.{dtype}')
    hvd.grouped_allreduce_(plain[1:], op=hvd.Sum, name=f'plain.out.group.{dtype}')
    assert _copied_out_bytes() == copied + nbytes
    for i in range(3):
        expected = sum(r + 1 + i for r in range(size))
        assert torch.equal(arena[i], plain[i])
        assert torch.equal(arena[i], torch.full_like(arena[i], expected))


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.bfloat16, torch.int64,
                                   torch.bool])
def test_in_place_broadcast_of_arena_tensors_needs_no_copy_out(dtype):
    rank, size = hvd.rank(), hvd.size()
    root = size - 1
    count = 4099
    arena = hvd.zeros(count, dtype=dtype)
    plain = torch.zeros(count, dtype=dtype)
    pattern = (torch.arange(count) % 7 + 10 * rank).to(dtype)
    arena.copy_(pattern)
    plain.copy_(pattern)
    copied = _copied_out_bytes()
    assert hvd.broadcast_(arena, root, name=f'arena.bcast.{dtype}') is arena
    assert _copied_out_bytes() == copied  # on one node and across nodes alike
    copied = _copied_out_bytes()
    hvd.broadcast_(plain, root, name=f'plain.bcast.{dtype}')
    assert _copied_out_bytes() == copied + count * plain.element_size()
    expected = (torch.arange(count) % 7 + 10 * root).to(dtype)
    assert torch.equal(arena, expected) and torch.equal(plain, expected)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int32])
def test_a_reducescatter_into_an_arena_output_needs_no_copy_out(dtype):
    # collective.torch makes reducescatter outputs itself; through the binding
    # a caller can name one in the arena, and the daemon writes its rows there.
    from collective import _core
    from collective.torch import tensor_args
    rank, size = hvd.rank(), hvd.size()
    rows = 2 * size + 1  # uneven: rank 0 gets one row more
    mine = rows // size + (1 if rank < rows % size else 0)
    first = rank * (rows // size) + min(rank, rows % size)
    source = (torch.arange(rows * 3).reshape(rows, 3) + rank).to(dtype)
    client = connection.current().client
    outputs = {}
    for kind, output in (('arena', hvd.zeros(mine, 3, dtype=dtype)),
                         ('plain', torch.zeros(mine, 3, dtype=dtype))):
        copied = _copied_out_bytes()
        handle = client.reducescatter_async(
            [f'{kind}.reducescatter.{dtype}'], [tensor_args.arg(source)], [output.data_ptr()],
            _core.REDUCE_OPS['sum'], 1.0, 1.0, 0)
        client.wait(handle[0])
        # Across nodes too, the daemon writes the arena output's rows.
        assert _copied_out_bytes() == copied + (0 if kind == 'arena' else output.numel() *
                                                output.element_size())
        outputs[kind] = output
    expected = sum((torch.arange(rows * 3).reshape(rows, 3) + r).to(dtype)
                   for r in range(size))[first:first + mine]
    assert torch.equal(outputs['arena'], expected) and torch.equal(outputs['plain'], expected)


@pytest.mark.parametrize('dtype', [torch.float32, torch.int64, torch.bfloat16])
def test_new_results_of_large_collectives_are_written_into_the_arena(dtype):
    # allreduce, broadcast, reducescatter and grouped_allreduce of ordinary tensors give new
    # tensors in the arena when they are large: the daemon writes them there (on one node
    # and across nodes alike), nothing is copied out, and a collective of such a result
    # reads it in place. Small results stay ordinary tensors, copied out.
    rank, size = hvd.rank(), hvd.size()
    count = 1 << 16  # 128 KiB of bfloat16 and more: over result_tensor's 64 KiB
    x = (torch.arange(count) % 5 + rank).to(dtype)
    strided = torch.stack([x, x], dim=1)[:, 0]  # not contiguous: the general path
    rows = torch.stack([x] * size)  # `size` rows of `count`: one row per rank
    nbytes = count * x.element_size()
    free = _free_bytes()
    copied = _copied_out_bytes()
    results = {
        'allreduce': hvd.allreduce(x, op=hvd.Sum, name=f'new.allreduce.{dtype}'),
        'general': hvd.allreduce(strided, op=hvd.Sum, name=f'new.general.{dtype}'),
        'async': hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name=f'new.async.{dtype}')),
        'grouped': hvd.grouped_allreduce([x], op=hvd.Sum, name=f'new.grouped.{dtype}')[0],
        'broadcast': hvd.broadcast(x, root_rank=0, name=f'new.broadcast.{dtype}'),
        'reducescatter': hvd.reducescatter(rows, op=hvd.Sum, name=f'new.rs.{dtype}')[0],
    }
    assert _copied_out_bytes() == copied
    assert _free_bytes() <= free - len(results) * nbytes  # each result holds a block
    total = sum((torch.arange(count) % 5 + r).to(dtype).double() for r in range(size))
    for kind in ('allreduce', 'general', 'async', 'grouped', 'reducescatter'):
        assert torch.equal(results[kind].double(), total), kind
    assert torch.equal(results['broadcast'], (torch.arange(count) % 5).to(dtype))
    # A chain reads the arena result in place and writes its own result there too.
    again = hvd.allreduce(results['allreduce'], op=hvd.Max, name=f'new.chain.{dtype}')
    assert _copied_out_bytes() == copied and torch.equal(again.double(), total)
    del results, again
    assert _free_bytes() == free  # the blocks went back with the tensors
    small = hvd.allreduce(x[:8].clone(), op=hvd.Sum, name=f'new.small.{dtype}')
    assert _copied_out_bytes() == copied + 8 * x.element_size()
    assert torch.equal(small.double(), total[:8])


def _model():
    torch.manual_seed(0)  # every rank makes the same model
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4),
                               torch.nn.Linear(4, 1)).double()


def test_to_arena_moves_a_modules_parameters_and_buffers_and_keeps_them_the_same_objects():
    model = _model()
    tensors = list(model.parameters()) + list(model.buffers())
    before = [(id(t), t.clone(), t.requires_grad) for t in tensors]
    assert not any(hvd.in_arena(t) for t in tensors)
    gc.collect()  # no earlier test's garbage (an optimizer's buckets) frees blocks meanwhile
    free = _free_bytes()
    moved = hvd.to_arena(model)
    assert moved == sum(t.numel() * t.element_size() for t in tensors)
    assert _free_bytes() <= free - moved
    after = list(model.parameters()) + list(model.buffers())
    for tensor, (identity, values, requires_grad) in zip(after, before):
        assert id(tensor) == identity and hvd.in_arena(tensor)
        assert torch.equal(tensor, values) and tensor.requires_grad == requires_grad
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())
    # The module computes and learns as before, in the arena.
    model(torch.ones(3, 5, dtype=torch.float64)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert hvd.in_arena(model[1].running_mean)  # the forward updated it in place


def test_broadcast_parameters_of_a_moved_model_copies_nothing():
    model = _model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(hvd.rank())
    hvd.to_arena(model)
    root_values = _model()
    copied = _copied_out_bytes()
    # In flight, a moved parameter holds no arena space for a copy: it is read in place.
    weight = model[0].weight
    gc.collect()  # no earlier test's garbage frees blocks meanwhile
    free = _free_bytes()
    handle = hvd.broadcast_async_(weight, root_rank=0, name='to_arena.weight')
    assert _free_bytes() == free
    assert hvd.synchronize(handle) is weight
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    assert _copied_out_bytes() == copied  # every result written into the arena by the daemon
    for (name, p), (_, root) in zip(model.state_dict().items(), root_values.state_dict().items()):
        assert torch.equal(p, root), name
        assert hvd.in_arena(p), name


def test_to_arena_moves_an_optimizers_state_for_broadcast_optimizer_state():
    model = torch.nn.Linear(256, 256).double()  # 514 KiB of momentum
    hvd.to_arena(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(3, 256, dtype=torch.float64)).sum().backward()
    optimizer.step()  # makes the momentum buffers, ordinary tensors
    buffers = [state['momentum_buffer'] for state in optimizer.state.values()]
    values = [b.clone() for b in buffers]
    assert hvd.to_arena(optimizer) == sum(b.numel() * b.element_size() for b in buffers)
    assert all(hvd.in_arena(b) for b in buffers)
    assert all(torch.equal(b, v) for b, v in zip(buffers, values))
    copied = _copied_out_bytes()
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    # Only the pickled hyperparameters (lr, momentum, ...) are copied out, not the buffers.
    assert _copied_out_bytes() - copied < 4096
    assert all(hvd.in_arena(state['momentum_buffer']) for state in optimizer.state.values())


def test_to_arena_leaves_alone_what_it_cannot_move_without_changing_aliases():
    base = torch.arange(8.0)
    view = base[2:6]  # a view of part of base's storage
    strided = torch.zeros(4, 2)[:, 0]  # not contiguous
    shared = torch.arange(4.0)
    shared_view = shared.view(2, 2)  # shares shared's storage
    complex_tensor = torch.zeros(2, dtype=torch.complex64)  # a dtype the daemon does not take
    nothing = torch.zeros(0)
    placed = hvd.zeros(4)  # in the arena already
    other_processes = torch.zeros(4).share_memory_()  # others may map it: it stays theirs
    sparse = torch.eye(3).to_sparse()
    meta = torch.zeros(4, device='meta')
    left = [view, strided, shared, shared_view, complex_tensor, nothing, other_processes, sparse,
            meta, placed]
    dense = [t for t in left if t.layout == torch.strided and not t.is_meta]
    addresses = [t.data_ptr() for t in dense]
    assert hvd.to_arena(left) == 0
    assert [t.data_ptr() for t in dense] == addresses
    assert sparse.is_sparse and torch.equal(sparse.to_dense(), torch.eye(3)) and meta.is_meta
    assert not any(hvd.in_arena(t) for t in left[:-1]) and hvd.in_arena(placed)
    # The aliases still alias: a write through one shows through the other.
    view.fill_(-1.0)
    shared_view[0, 0] = 7.0
    assert base.tolist() == [0.0, 1.0, -1.0, -1.0, -1.0, -1.0, 6.0, 7.0]
    assert shared[0].item() == 7.0
    # in_arena of any tensor: a strided view of an arena tensor lies in it, a sparse
    # tensor does not.
    assert hvd.in_arena(hvd.zeros(4, 3)[:, 1]) and hvd.in_arena(hvd.zeros(2, 2).t())
    assert not hvd.in_arena(torch.zeros(2, 2).to_sparse()) and not hvd.in_arena(nothing)
    with pytest.raises(ValueError, match='to_arena takes tensors, not int'):
        hvd.to_arena([torch.zeros(1), 2])
    with pytest.raises(ValueError, match='not NoneType'):
        hvd.to_arena(None)


def test_to_arena_takes_at_most_its_share_of_the_arena(monkeypatch):
    from collective.torch import grad_buckets
    budget = 64 << 10
    monkeypatch.setattr(grad_buckets, 'ARENA_SHARE', budget / _free_bytes())
    large = torch.ones(2 * budget // 4)  # over the share: stays
    small = {'a': torch.ones(16), 'b': torch.full((16,), 2.0)}  # a state_dict's form
    assert hvd.to_arena([('large', large)] + list(small.items())) == 2 * 16 * 4
    assert not hvd.in_arena(large)
    assert hvd.in_arena(small['a']) and hvd.in_arena(small['b'])
    assert small['b'].tolist() == [2.0] * 16


def test_a_moved_model_trains_as_the_same_model_in_ordinary_memory():
    steps = 3
    models = {'moved': _model(), 'plain': _model()}
    hvd.to_arena(models['moved'])
    torch.manual_seed(hvd.rank())
    batches = [torch.randn(6, 5, dtype=torch.float64) for _ in range(steps)]
    for kind, model in models.items():
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            named_parameters=[(f'{kind}.{name}', p) for name, p in model.named_parameters()])
        for batch in batches:
            optimizer.zero_grad()
            model(batch).square().sum().backward()
            optimizer.step()
    for (name, moved), plain in zip(models['moved'].state_dict().items(),
                                    models['plain'].state_dict().values()):
        assert torch.equal(moved, plain), name
        assert hvd.in_arena(moved), name
