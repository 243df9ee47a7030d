"""op=hvd.Adasum: allreduce, grouped allreduce and DistributedOptimizer against a reference of
Horovod's formula, and the refusals: Horovod's (sizes that are not powers of two, integer
tensors) and collectived's own (nodes holding different numbers of ranks, in
multinode_python_test).

The reference combines the ranks' inputs as a binary tree, neighbours first, in float64 with
each level rounded to the tensor's dtype: Adasum(a, b) = (1 - a·b/2‖a‖²) a + (1 - a·b/2‖b‖²) b,
a coefficient being 1 when its vector's ‖·‖² is below 1e-8.
"""

import pytest
import torch

import collective.torch as hvd
from collective import _core
from collective.common import basics, connection, reduce_ops
from collective.common.exceptions import HorovodInternalError
from collective.torch import async_ops, tensor_args
from rank_tensors import FLOAT_DTYPES

TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float32: 1e-5,
             torch.float64: 1e-12}


def _power_of_two():
    return hvd.size() & (hvd.size() - 1) == 0


def _supported():
    # Across nodes, every node must hold as many ranks as the others.
    return _power_of_two() and hvd.is_homogeneous()


def _refused():
    """The error an Adasum allreduce of the global set raises where it is not supported."""
    if not _power_of_two():
        return pytest.raises(NotImplementedError, match='non-power of 2 ranks')
    # The daemon's refusal (UNIMPLEMENTED), on every rank.
    return pytest.raises(NotImplementedError,
                         match='Adasum across nodes needs every node to hold the same number')


def _adasum_pair(a, b, dtype):
    dot, a_norm, b_norm = torch.dot(a, b), torch.dot(a, a), torch.dot(b, b)
    a_coeff = 1.0 if a_norm < 1e-8 else 1.0 - dot / (2 * a_norm)
    b_coeff = 1.0 if b_norm < 1e-8 else 1.0 - dot / (2 * b_norm)
    return (a_coeff * a + b_coeff * b).to(dtype).double()


def reference_adasum(vectors, dtype):
    """Adasum of a list of tensors, halves first, each level rounded to ``dtype``."""
    if len(vectors) == 1:
        return vectors[0].double().flatten()
    half = len(vectors) // 2
    return _adasum_pair(reference_adasum(vectors[:half], dtype),
                        reference_adasum(vectors[half:], dtype), dtype)


def rank_vector(rank, shape, dtype, seed=0):
    """Rank ``rank``'s input: a shared direction scaled by the rank plus the rank's own noise,
    so that the Adasum coefficients are far from 1 and depend on the pairing order."""
    shared = torch.Generator().manual_seed(1000 + seed)
    own = torch.Generator().manual_seed(rank * 7919 + seed)
    base = torch.randn(shape, generator=shared, dtype=torch.float64)
    noise = torch.randn(shape, generator=own, dtype=torch.float64)
    return ((1 + 0.5 * rank) * base + noise).to(dtype)


def _expected(shape, dtype, seed=0, prescale=1.0):
    inputs = [rank_vector(r, shape, dtype, seed) for r in range(hvd.size())]
    if prescale != 1.0:
        inputs = [(prescale * t.double()).to(dtype) for t in inputs]
    return reference_adasum(inputs, dtype).reshape(shape)


def _assert_close(result, expected, dtype):
    scale = max(expected.abs().max().item(), 1e-30)
    error = (result.double() - expected).abs().max().item()
    assert error <= TOLERANCE[dtype] * scale, (dtype, error, scale)


@pytest.mark.parametrize('dtype', FLOAT_DTYPES, ids=str)
def test_allreduce_adasum_matches_the_formula(dtype):
    for shape in [(1,), (17,), (5, 3), (64, 33)]:
        tensor = rank_vector(hvd.rank(), shape, dtype)
        before = tensor.clone()
        if not _supported():
            with _refused():
                hvd.allreduce(tensor, op=hvd.Adasum, name=f'adasum.{shape}')
            continue
        result = hvd.allreduce(tensor, op=hvd.Adasum, name=f'adasum.{shape}')
        assert result.dtype == dtype and result.shape == tensor.shape
        assert torch.equal(tensor, before), 'allreduce modified its input'
        _assert_close(result, _expected(shape, dtype), dtype)


def test_adasum_is_not_a_sum_or_an_average():
    if not _supported():
        pytest.skip('Adasum needs a power-of-two number of ranks, as many on every node')
    tensor = rank_vector(hvd.rank(), (32,), torch.float64)
    result = hvd.allreduce(tensor, op=hvd.Adasum)
    total = hvd.allreduce(tensor, op=hvd.Sum)
    average = hvd.allreduce(tensor, op=hvd.Average)
    assert not torch.allclose(result, total) and not torch.allclose(result, average)
    # Equal inputs give themselves back: Adasum(a, a) = a.
    same = rank_vector(0, (32,), torch.float64)
    assert torch.allclose(hvd.allreduce(same, op=hvd.Adasum), same, rtol=1e-12, atol=0)


def test_grouped_adasum_combines_each_tensor_on_its_own():
    # The tensors are fused into one buffer; the dot products must still be
    # each tensor's, not the fused buffer's.
    if not _supported():
        with _refused():
            hvd.grouped_allreduce([torch.ones(3)], op=hvd.Adasum)
        return
    shapes = [(7,), (4, 5), (129,)]
    tensors = [rank_vector(hvd.rank(), s, torch.float32, seed=i) for i, s in enumerate(shapes)]
    results = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name='grouped.adasum')
    for i, (shape, result) in enumerate(zip(shapes, results)):
        _assert_close(result, _expected(shape, torch.float32, seed=i), torch.float32)

    in_place = [t.clone() for t in tensors]
    hvd.grouped_allreduce_(in_place, op=hvd.Adasum, name='grouped.adasum_')
    for i, (shape, result) in enumerate(zip(shapes, in_place)):
        _assert_close(result, _expected(shape, torch.float32, seed=i), torch.float32)


def test_adasum_scale_factors_and_in_place():
    if not _supported():
        pytest.skip('Adasum needs a power-of-two number of ranks, as many on every node')
    tensor = rank_vector(hvd.rank(), (40,), torch.float64)
    result = hvd.allreduce(tensor, op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0)
    _assert_close(result, 3.0 * _expected((40,), torch.float64, prescale=0.5), torch.float64)
    hvd.allreduce_(tensor, op=hvd.Adasum)
    _assert_close(tensor, _expected((40,), torch.float64), torch.float64)


def test_adasum_writes_its_results_into_the_arena_with_no_copy_out():
    # As for the other reductions: a large new result is an arena tensor that the daemon
    # writes once the whole tensor is combined, and an arena tensor reduced in place gets
    # its result where it is; nothing is copied out (on one node and across nodes).
    if not _supported():
        pytest.skip('Adasum needs a power-of-two number of ranks, as many on every node')
    shape = (1 << 15,)  # 128 KiB of float32: over result_tensor's 64 KiB
    tensor = rank_vector(hvd.rank(), shape, torch.float32)
    in_arena = hvd.empty(shape)
    in_arena.copy_(tensor)
    copied = connection.current().client.copied_out_bytes
    result = hvd.allreduce(tensor, op=hvd.Adasum, name='adasum.new_result')
    hvd.allreduce_(in_arena, op=hvd.Adasum, name='adasum.arena_in_place')
    assert connection.current().client.copied_out_bytes == copied
    _assert_close(result, _expected(shape, torch.float32), torch.float32)
    assert torch.equal(in_arena, result), 'both paths combine the same inputs alike'


@pytest.mark.parametrize('dtype', [torch.int32, torch.int64, torch.uint8], ids=str)
def test_adasum_refuses_integer_tensors(dtype):
    # The size is judged first, as in Horovod.
    refusal = (pytest.raises(ValueError, match='reduce op adasum is not defined for')
               if _power_of_two() else _refused())
    with refusal:
        hvd.allreduce(torch.ones(4, dtype=dtype), op=hvd.Adasum)


def test_adasum_optimizer_applies_the_adasum_of_every_rank_update():
    model = torch.nn.Linear(6, 1, bias=False, dtype=torch.float64)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = model.weight.detach().clone()
    lr = 0.1
    if not _power_of_two():
        with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                     named_parameters=model.named_parameters(), op=hvd.Adasum)
        return
    if not _supported():
        pytest.skip('Adasum across nodes needs as many ranks on every node')
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                         named_parameters=model.named_parameters(),
                                         op=hvd.Adasum)

    def batch(rank):
        g = torch.Generator().manual_seed(rank + 11)
        return torch.randn(8, 6, generator=g, dtype=torch.float64), \
            torch.randn(8, 1, generator=g, dtype=torch.float64)

    x, y = batch(hvd.rank())
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()

    # Every rank's SGD delta -lr * grad, combined by Adasum, added to the start.
    deltas = []
    for rank in range(hvd.size()):
        w = start.clone().requires_grad_()
        xr, yr = batch(rank)
        torch.nn.functional.mse_loss(xr @ w.t(), yr).backward()
        deltas.append(-lr * w.grad)
    expected = start.flatten() + reference_adasum(deltas, torch.float64)
    _assert_close(model.weight.detach().flatten(), expected, torch.float64)


def test_adasum_optimizer_converges():
    if not _supported():
        pytest.skip('Adasum needs a power-of-two number of ranks, as many on every node')
    torch.manual_seed(5)
    true_w = torch.tensor([[1.5, -2.0, 0.5, 3.0]])
    model = torch.nn.Linear(4, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters(),
                                         op=hvd.Adasum)
    data = torch.Generator().manual_seed(100 + hvd.rank())
    first_loss = None
    for _ in range(150):
        x = torch.randn(16, 4, generator=data)
        y = x @ true_w.t() + 0.7
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        first_loss = first_loss if first_loss is not None else loss.item()
    assert loss.item() < 1e-3 * first_loss, (first_loss, loss.item())
    assert torch.allclose(model.weight.detach(), true_w, atol=1e-2)
    # Every rank holds the same weights.
    gathered = hvd.allgather(model.weight.detach())
    assert torch.equal(gathered, model.weight.detach().repeat(hvd.size(), 1))


def test_adasum_on_a_process_set_is_refused_at_the_call(static_process_sets):
    # Horovod: NotImplementedError before anything is submitted, whatever the set's size.
    evens, _ = static_process_sets
    if evens.included():
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=evens)
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.grouped_allreduce([torch.ones(1)], op=hvd.Adasum, process_set=evens)
        # Nothing was submitted: the set still runs a plain allreduce.
        total = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=evens)
        assert total.tolist() == [float(evens.size())]
    hvd.barrier()  # the others stay in the job until the set is done


# Horovod's NCCL build combines GPU tensors otherwise: each node's ranks summed, the nodes'
# sums combined by Adasum, the result divided by the local size. collective.torch asks the
# daemon for that scope for CUDA tensors when it runs them through NCCL (nccl_built()); these
# tests ask for it with host tensors, through the call the CUDA path makes after its copy to
# host memory, so that they run on machines without a GPU.

def _nodes_scope_allreduce(tensor, name, prescale=1.0, postscale=1.0):
    output = torch.empty_like(tensor)
    # Named as hvd.allreduce names its tensors.
    base = async_ops._base_name('allreduce', name, _core.GLOBAL_PROCESS_SET)
    handle = async_ops._reduction_async(
        base, [tensor], [tensor_args.Destination(output)], hvd.Adasum, prescale, postscale,
        _core.GLOBAL_PROCESS_SET, False, connection.current().client.allreduce_async,
        async_ops._place('allreduce', [tensor]), adasum_scope=_core.ADASUM_SCOPES['nodes'])
    return hvd.synchronize(handle)


def _nodes_scope_expected(shape, dtype, seed, prescale=1.0, postscale=1.0):
    """The nodes' sums (of consecutive ranks) combined by the Adasum tree, times postscale over
    the local size."""
    local = hvd.local_size()
    inputs = [(prescale * rank_vector(r, shape, dtype, seed).double()) for r in range(hvd.size())]
    sums = [sum(inputs[n * local:(n + 1) * local]).to(dtype) for n in range(hvd.size() // local)]
    return reference_adasum(sums, dtype).reshape(shape) * (postscale / local)


def _nodes_scope_supported():
    nodes = hvd.size() // hvd.local_size()
    return hvd.is_homogeneous() and nodes & (nodes - 1) == 0


@pytest.mark.parametrize('dtype', FLOAT_DTYPES, ids=str)
def test_gpu_adasum_combines_the_nodes_sums_over_the_local_size(dtype):
    # Any number of ranks on a node (3 included), as in Horovod's NCCL build.
    assert hvd.local_rank() == hvd.rank() % hvd.local_size() or not hvd.is_homogeneous()
    for shape in [(1,), (17,), (5, 3)]:
        name = f'adasum.nodes.{dtype}.{shape}'
        tensor = rank_vector(hvd.rank(), shape, dtype, seed=5)
        if not _nodes_scope_supported():
            with pytest.raises(NotImplementedError,
                               match='needs every node to hold the same number'):
                _nodes_scope_allreduce(tensor, name)
            continue
        result = _nodes_scope_allreduce(tensor, name, prescale=2.0, postscale=0.5)
        assert result.dtype == dtype and result.shape == tensor.shape
        _assert_close(result, _nodes_scope_expected(shape, dtype, 5, 2.0, 0.5), dtype)
    if _nodes_scope_supported() and hvd.size() == hvd.local_size():
        # On one node it is the average.
        tensor = rank_vector(hvd.rank(), (9,), torch.float64, seed=6)
        assert torch.allclose(_nodes_scope_allreduce(tensor, 'adasum.nodes.average'),
                              hvd.allreduce(tensor, op=hvd.Average), rtol=1e-12, atol=1e-12)


def test_ranks_asking_for_different_adasum_scopes_fail_together():
    # A rank with a GPU tensor where the others pass host tensors, under one name.
    if not (_supported() and _nodes_scope_supported()) or hvd.size() == 1:
        pytest.skip('needs a job both variants support, of more than one rank')
    tensor = rank_vector(hvd.rank(), (4,), torch.float32)
    with pytest.raises(HorovodInternalError, match='Mismatched Adasum scopes'):
        if hvd.rank() == 0:
            _nodes_scope_allreduce(tensor, 'adasum.scope.mixed')
        else:
            hvd.allreduce(tensor, op=hvd.Adasum, name='adasum.scope.mixed')


def test_gpu_adasum_refusals_are_horovods(monkeypatch):
    # The checks of a CUDA tensor's Adasum where the daemon has its NCCL path, at the call.
    monkeypatch.setattr(basics, 'nccl_built', lambda: True)
    scope = reduce_ops.check_adasum_set(hvd.global_process_set, on_gpu=True) \
        if _nodes_scope_supported() else None
    if scope is not None:
        assert scope == _core.ADASUM_SCOPES['nodes']
    monkeypatch.setattr(basics, 'is_homogeneous', lambda: False)
    with pytest.raises(NotImplementedError, match='heterogeneous cluster'):
        reduce_ops.check_adasum_set(hvd.global_process_set, on_gpu=True)
    monkeypatch.setattr(basics, 'is_homogeneous', lambda: True)
    monkeypatch.setattr(basics, 'cross_size', lambda: 3)  # 3 nodes
    with pytest.raises(NotImplementedError, match='non-power of 2 nodes'):
        reduce_ops.check_adasum_set(hvd.global_process_set, on_gpu=True)
    monkeypatch.setattr(basics, 'cross_size', lambda: 2)  # of any number of ranks each
    assert reduce_ops.check_adasum_set(hvd.global_process_set, on_gpu=True) == \
        _core.ADASUM_SCOPES['nodes']
    # Without the NCCL path, GPU tensors take the host tensors' rules, with a warning.
    monkeypatch.setattr(basics, 'nccl_built', lambda: False)
    with pytest.warns(UserWarning, match='no NCCL path'):
        if _power_of_two():
            assert reduce_ops.check_adasum_set(hvd.global_process_set, on_gpu=True) == \
                _core.ADASUM_SCOPES['ranks']
        else:
            with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
                reduce_ops.check_adasum_set(hvd.global_process_set, on_gpu=True)
