"""collective.torch on CUDA tensors: every collective, its async and in-place forms,
autograd, DistributedOptimizer, stream ordering and the device errors, with every rank of
the job sharing the machine's GPUs (rank r uses GPU local_rank mod device count, so on a
machine with one GPU every rank shares it and the daemon reduces on the device).

Needs a GPU: without one (torch.cuda.is_available() False, as on the CPU-only CI machine)
every test here is skipped, and reported as skipped. Run on a GPU machine with
  collectiverun -np 3 python3 -m pytest -q -rs tests/python/test_torch_cuda.py
(PYTHONPATH=build/python), or ctest -R python_ which runs the whole suite.
"""

import pytest
import torch

import collective.torch as hvd
from _helpers import rank_batch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason='needs a CUDA GPU: torch.cuda.is_available() is False on this machine')

if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
           torch.int64, torch.uint8, torch.int8]


def _device():
    return torch.device('cuda', torch.cuda.current_device())


def _rank_tensor(rank, shape, dtype, seed=0):
    """Rank `rank`'s input, small integers so that every dtype sums exactly."""
    values = (rank_batch(rank, shape, seed=seed) * 3).round().clamp(-4, 4)
    if dtype in (torch.uint8,):
        values = values.abs()
    return values.to(dtype).to(_device())


def _job_goes_on():
    out = hvd.allreduce(torch.ones(3, device=_device()), op=hvd.Sum)
    assert out.device == _device()
    assert out.tolist() == [hvd.size()] * 3


def test_cuda_and_nccl_are_built():
    assert hvd.cuda_built(), 'a GPU is visible, but collective.torch does not take CUDA ' \
                             'tensors (no driver for libcollective, or a daemon without CUDA)'
    # Horovod's int (NCCL_VERSION_CODE), as its suite compares it: `hvd.nccl_built() < 2700`.
    assert type(hvd.nccl_built()) is int and hvd.nccl_built() >= 2700


@pytest.mark.parametrize('dtype', _DTYPES, ids=str)
def test_allreduce_sums_on_the_device(dtype):
    size = hvd.size()
    tensor = _rank_tensor(hvd.rank(), (17, 5), dtype)
    summed = hvd.allreduce(tensor, op=hvd.Sum, name=f'cuda.sum.{dtype}')
    assert summed.device == tensor.device and summed.dtype == dtype
    # Each rank's input as that rank made it (uint8 takes absolute values).
    expected = sum(_rank_tensor(r, (17, 5), dtype).cpu().double() for r in range(size))
    assert torch.equal(summed.cpu().double(), expected)


@pytest.mark.parametrize('op', ['Average', 'Min', 'Max', 'Product'])
def test_allreduce_ops(op):
    size = hvd.size()
    tensor = _rank_tensor(hvd.rank(), (33,), torch.float64, seed=1)
    got = hvd.allreduce(tensor, op=getattr(hvd, op), name=f'cuda.op.{op}').cpu()
    inputs = torch.stack([_rank_tensor(r, (33,), torch.float64, seed=1).cpu()
                          for r in range(size)])
    expected = {'Average': inputs.mean(0), 'Min': inputs.min(0).values,
                'Max': inputs.max(0).values, 'Product': inputs.prod(0)}[op]
    assert torch.allclose(got, expected)


def test_allreduce_scale_factors():
    tensor = torch.ones(8, device=_device())
    got = hvd.allreduce(tensor, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert got.tolist() == [float(hvd.size())] * 8


def test_in_place_and_async_forms():
    size = hvd.size()
    tensor = torch.full((1000,), float(hvd.rank() + 1), device=_device())
    address = tensor.data_ptr()
    assert hvd.allreduce_(tensor, op=hvd.Sum) is tensor
    assert tensor.data_ptr() == address
    assert torch.all(tensor == size * (size + 1) / 2)

    handle = hvd.allreduce_async(torch.ones(10, device=_device()), op=hvd.Sum)
    out = hvd.synchronize(handle)
    assert out.device == _device() and out.tolist() == [float(size)] * 10

    tensor = torch.ones(10, device=_device())
    handle = hvd.allreduce_async_(tensor, op=hvd.Average)
    assert hvd.synchronize(handle) is tensor
    assert tensor.tolist() == [1.0] * 10

    # A non-contiguous tensor in place: written through a contiguous stand-in.
    wide = torch.ones(6, 4, device=_device())
    column = wide[:, 1]
    hvd.allreduce_(column, op=hvd.Sum)
    assert wide[:, 1].tolist() == [float(size)] * 6
    assert wide[:, 0].tolist() == [1.0] * 6


def test_grouped_allreduce_and_its_in_place_form():
    size = hvd.size()
    tensors = [torch.full((n,), float(n), device=_device()) for n in (1, 7, 300)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    assert [o.tolist() for o in outs] == [[float(n * size)] * n for n in (1, 7, 300)]
    assert [t.tolist() for t in tensors] == [[float(n)] * n for n in (1, 7, 300)]
    results = hvd.grouped_allreduce_(tensors, op=hvd.Sum)
    assert all(r is t for r, t in zip(results, tensors))
    assert [t.tolist() for t in tensors] == [[float(n * size)] * n for n in (1, 7, 300)]


def test_zero_length_tensors_on_the_device():
    # Empty CUDA tensors have no allocation to register; every collective
    # still completes with the shapes the CPU path gives, on the device.
    size, rank = hvd.size(), hvd.rank()
    empty = torch.empty(0, 3, device=_device())
    for out in (hvd.allreduce(empty, name='cuda.empty.allreduce'),
                hvd.allreduce_(torch.empty(0, 3, device=_device()), name='cuda.empty.allreduce_'),
                hvd.allgather(empty, name='cuda.empty.allgather'),
                hvd.broadcast(empty, 0, name='cuda.empty.broadcast'),
                hvd.alltoall(empty, name='cuda.empty.alltoall'),
                hvd.reducescatter(empty, name='cuda.empty.reducescatter')):
        assert out.device == _device() and out.numel() == 0 and out.shape[1:] == empty.shape[1:]
    # Empty beside non-empty: in one group, and as one rank's allgather share.
    outs = hvd.grouped_allreduce([torch.empty(0, device=_device()),
                                  torch.ones(2, device=_device())], op=hvd.Sum,
                                 name='cuda.empty.grouped')
    assert outs[0].shape == (0,) and outs[1].tolist() == [float(size)] * 2
    rows = torch.full((rank, 2), float(rank), device=_device())  # rank 0 sends none
    gathered = hvd.allgather(rows, name='cuda.empty.uneven')
    assert gathered.tolist() == [[float(r)] * 2 for r in range(size) for _ in range(r)]
    # Non-empty inputs whose result is empty on some ranks: one row scattered
    # among several ranks, and an alltoall that sends rank 0 nothing.
    share = hvd.reducescatter(torch.ones(1, 2, device=_device()), op=hvd.Sum,
                              name='cuda.empty.reducescatter_share')
    assert share.device == _device() and share.shape == ((1 if rank == 0 else 0), 2)
    if rank == 0:
        assert share.tolist() == [[float(size)] * 2]
    sends = torch.full((size - 1, 2), float(rank), device=_device())
    received, counts = hvd.alltoall(sends, splits=[0] + [1] * (size - 1),
                                    name='cuda.empty.alltoall_share')
    assert received.device == _device()
    assert received.tolist() == ([] if rank == 0 else [[float(r)] * 2 for r in range(size)])
    assert counts.tolist() == [0 if rank == 0 else 1] * size
    _job_goes_on()


def test_an_output_too_small_for_its_result_fails_every_rank():
    # Through the binding, as collective.torch never submits it: an alltoall
    # with no output (null, no bytes: how an empty result is named) whose
    # result is not empty.
    from collective import _core
    from collective.common import connection
    from collective.torch import tensor_args
    size = hvd.size()
    source = torch.ones(size, device=_device())
    handle = connection.current().client.alltoall_async(
        'cuda.alltoall.no_output', tensor_args.arg(source), [], 0,
        device=_core.DEVICES['cuda'], cuda_stream=torch.cuda.current_stream().cuda_stream)
    with pytest.raises(RuntimeError, match=f"output holds 0 bytes; its result needs {size * 4}"):
        connection.current().client.wait(handle)
    _job_goes_on()


def test_the_callers_stream_orders_the_collective():
    # A long kernel, then the write the allreduce must see, both on a side
    # stream: the daemon may read the input only once the stream got there.
    # No host synchronization anywhere until the result is read.
    stream = torch.cuda.Stream()
    tensor = torch.zeros(1 << 20, device=_device())
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)
        tensor.fill_(hvd.rank() + 1.0)
        handle = hvd.allreduce_async(tensor, op=hvd.Sum, name='cuda.stream.order')
        out = hvd.synchronize(handle)
        doubled = out * 2  # queued after the stream's wait for the result
    stream.synchronize()
    size = hvd.size()
    assert torch.all(doubled == size * (size + 1))


def test_allgather_with_different_first_dimensions():
    size, rank = hvd.size(), hvd.rank()
    tensor = torch.full((rank + 1, 3), float(rank), device=_device())
    gathered = hvd.allgather(tensor)
    assert gathered.device == _device()
    expected = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(size)])
    assert torch.equal(gathered.cpu(), expected)

    handle = hvd.allgather_async(tensor.to(torch.int64))
    assert torch.equal(hvd.synchronize(handle).cpu(), expected.to(torch.int64))

    outs = hvd.grouped_allgather([tensor, torch.arange(2, device=_device()) + rank])
    assert torch.equal(outs[0].cpu(), expected)
    assert outs[1].tolist() == [v for r in range(size) for v in (r, r + 1)]


def test_broadcast_from_every_root_and_in_place():
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        tensor = torch.full((5, 2), float(rank), device=_device())
        out = hvd.broadcast(tensor, root_rank=root)
        assert out.device == _device() and torch.all(out == root)
        assert torch.all(tensor == rank)
        assert hvd.broadcast_(tensor, root_rank=root) is tensor
        assert torch.all(tensor == root)
        handle = hvd.broadcast_async_(torch.full((3,), float(rank), device=_device()), root)
        assert hvd.synchronize(handle).tolist() == [float(root)] * 3


def test_alltoall_with_and_without_splits():
    size, rank = hvd.size(), hvd.rank()
    tensor = torch.arange(size * 2, dtype=torch.float32, device=_device()) + 100 * rank
    out = hvd.alltoall(tensor)
    assert out.device == _device()
    expected = torch.cat([torch.arange(2 * rank, 2 * rank + 2) + 100.0 * r for r in range(size)])
    assert torch.equal(out.cpu(), expected)

    # Rank r sends r + j + 1 rows to rank j.
    splits = torch.tensor([rank + j + 1 for j in range(size)], dtype=torch.int32)
    rows = torch.cat([torch.full((n, 2), float(10 * rank + j)) for j, n in
                      enumerate(splits.tolist())]).to(_device())
    out, received = hvd.alltoall(rows, splits=splits)
    assert received.tolist() == [r + rank + 1 for r in range(size)]
    expected = torch.cat([torch.full((r + rank + 1, 2), float(10 * r + rank))
                          for r in range(size)])
    assert torch.equal(out.cpu(), expected)


def test_reducescatter_and_grouped_reducescatter():
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1  # uneven: the first rank gets one row more
    tensor = torch.arange(rows * 3, dtype=torch.float32, device=_device()).reshape(rows, 3)
    out = hvd.reducescatter(tensor, op=hvd.Sum)
    mine = rows // size + (1 if rank < rows % size else 0)
    first = rank * (rows // size) + min(rank, rows % size)
    assert out.device == _device() and out.shape == (mine, 3)
    assert torch.equal(out.cpu(), tensor.cpu()[first:first + mine] * size)
    outs = hvd.grouped_reducescatter([tensor, tensor.double()], op=hvd.Average)
    assert torch.equal(outs[0].cpu(), tensor.cpu()[first:first + mine])
    assert torch.equal(outs[1].cpu(), tensor.cpu().double()[first:first + mine])


def test_gradients_stay_on_the_device():
    tensor = torch.ones(4, device=_device(), requires_grad=True)
    hvd.allreduce(tensor * 2, op=hvd.Sum).sum().backward()
    assert tensor.grad.device == _device()
    assert tensor.grad.tolist() == [2.0 * hvd.size()] * 4


def test_distributed_optimizer_matches_single_process_training():
    size, rank, per_rank = hvd.size(), hvd.rank(), 4
    torch.manual_seed(3)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, 2)).double().to(_device())
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 2)).double().to(_device())
    model.load_state_dict(reference.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank)  # start apart: the broadcast must fix it
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1,
                                                         momentum=0.9),
                                         named_parameters=model.named_parameters())
    for step in range(4):
        inputs = rank_batch(step, (size * per_rank, 6), seed=9).to(_device())
        targets = rank_batch(step, (size * per_rank, 2), seed=10).to(_device())
        reference_optimizer.zero_grad()
        torch.nn.functional.mse_loss(reference(inputs), targets).backward()
        reference_optimizer.step()
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[mine]), targets[mine]).backward()
        optimizer.step()
    for got, want in zip(model.parameters(), reference.parameters()):
        assert got.device == _device()
        assert torch.allclose(got, want, atol=1e-10)


def test_a_cpu_gpu_mix_in_one_grouped_collective_is_refused_at_the_call():
    tensors = [torch.ones(10) if i % 2 else torch.ones(10, device=_device()) for i in range(5)]
    for call in (hvd.grouped_allreduce, hvd.grouped_allgather,
                 lambda ts: hvd.grouped_reducescatter(ts, op=hvd.Sum)):
        with pytest.raises(RuntimeError, match='mixes tensors on'):
            call(tensors)
    _job_goes_on()


def test_tensors_on_two_gpus_in_one_collective_are_refused():
    if torch.cuda.device_count() < 2:
        pytest.skip('needs two GPUs on the machine')
    tensors = [torch.ones(4, device='cuda:0'), torch.ones(4, device='cuda:1')]
    with pytest.raises(RuntimeError, match='mixes tensors on cuda:0 and cuda:1'):
        hvd.grouped_allreduce(tensors)
    _job_goes_on()


def test_a_cpu_gpu_mix_across_ranks_fails_every_rank(two_ranks):
    # Horovod's test_horovod_allreduce_cpu_gpu_error: even ranks send a CUDA
    # tensor, odd ranks a CPU one, under the same name.
    device = _device() if hvd.rank() % 2 == 0 else torch.device('cpu')
    with pytest.raises(RuntimeError, match='GPU tensor|CPU tensor'):
        hvd.allreduce(torch.ones(17, 17, device=device), name='cuda.mixed.across.ranks')
    _job_goes_on()


def test_sync_batch_norm_normalizes_over_every_ranks_batch():
    size, rank, per_rank = hvd.size(), hvd.rank(), 3
    batch = rank_batch(0, (size * per_rank, 4, 5), seed=12).to(_device())
    reference = torch.nn.BatchNorm1d(4).double().to(_device())
    synced = hvd.SyncBatchNorm(4).double().to(_device())
    mine = batch[rank * per_rank:(rank + 1) * per_rank].clone().requires_grad_()
    whole = batch.clone().requires_grad_()
    out = synced(mine)
    want = reference(whole)
    assert out.device == _device()
    assert torch.allclose(out, want[rank * per_rank:(rank + 1) * per_rank], atol=1e-10)
    assert torch.allclose(synced.running_mean, reference.running_mean, atol=1e-10)
    (out * out).sum().backward()
    (want * want).sum().backward()
    assert torch.allclose(mine.grad, whole.grad[rank * per_rank:(rank + 1) * per_rank],
                          atol=1e-8)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
def test_adasum_of_cuda_tensors_is_horovods_for_the_build(dtype):
    # With the daemon's NCCL path (nccl_built()), Horovod's NCCL build's variant: the nodes'
    # sums combined by Adasum, over the local size; on one node, the average, for any number
    # of ranks. Without it, as Horovod without NCCL: through host memory, the same bits as the
    # CPU tensors' Adasum.
    size = hvd.size()
    a = (_rank_tensor(hvd.rank(), (33,), torch.float64, seed=3) + hvd.rank()).to(dtype)
    b = (_rank_tensor(hvd.rank(), (4, 5), torch.float64, seed=4) - hvd.rank()).to(dtype)
    if hvd.nccl_built():
        if hvd.cross_size() != 1:
            pytest.skip("the reference below is one node's")
        tolerance = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
        combined = hvd.allreduce(a, op=hvd.Adasum, name=f'cuda.adasum.{dtype}')
        assert combined.device == a.device and combined.dtype == dtype
        average = hvd.allreduce(a.cpu(), op=hvd.Average, name=f'cuda.adasum.host.{dtype}')
        assert torch.allclose(combined.cpu().double(), average.double(), rtol=tolerance,
                              atol=tolerance)
        in_place = [a.clone(), b.clone()]
        hvd.grouped_allreduce_(in_place, op=hvd.Adasum)
        for got, want in zip(in_place, hvd.grouped_allreduce([a.cpu(), b.cpu()])):
            assert got.device == a.device
            assert torch.allclose(got.cpu().double(), want.double(), rtol=tolerance,
                                  atol=tolerance)
        _job_goes_on()
        return
    if size & (size - 1):
        with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
            hvd.allreduce(torch.ones(3, device=_device()), op=hvd.Adasum)
        return
    on_host = hvd.allreduce(a.cpu(), op=hvd.Adasum, name=f'cuda.adasum.host.{dtype}')
    combined = hvd.allreduce(a, op=hvd.Adasum, name=f'cuda.adasum.{dtype}')
    assert combined.device == a.device and combined.dtype == dtype
    assert torch.equal(combined.cpu(), on_host)
    grouped_host = hvd.grouped_allreduce([a.cpu(), b.cpu()], op=hvd.Adasum)
    in_place = [a.clone(), b.clone()]
    hvd.grouped_allreduce_(in_place, op=hvd.Adasum)
    for got, want in zip(in_place, grouped_host):
        assert got.device == a.device
        assert torch.equal(got.cpu(), want)
    _job_goes_on()
