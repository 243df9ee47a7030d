"""SyncBatchNorm against torch.nn.BatchNorm run on the concatenation of every rank's batch."""

import pytest
import torch

import collective.torch as ct
from _helpers import rank_batch

_BATCH_NORMS = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
                5: torch.nn.BatchNorm3d}


def _inputs(shape, uneven):
    """Every rank's input (rank r has r extra rows when uneven) and loss weights."""
    rows = [shape[0] + (rank if uneven else 0) for rank in range(ct.size())]
    inputs = [rank_batch(rank, (n,) + shape[1:]) * 3 + 1 for rank, n in enumerate(rows)]
    weights = [rank_batch(rank, (n,) + shape[1:], seed=1) for rank, n in enumerate(rows)]
    return inputs, weights


def _copy_affine(target, source):
    with torch.no_grad():
        target.weight.copy_(source.weight)
        target.bias.copy_(source.bias)


@pytest.mark.parametrize('shape', [(4, 3), (3, 2, 5), (2, 3, 4, 4), (2, 2, 2, 3, 2)])
@pytest.mark.parametrize('uneven', [False, True])
def test_matches_batch_norm_on_concatenated_batch(shape, uneven):
    channels = shape[1]
    inputs, weights = _inputs(shape, uneven)
    reference = _BATCH_NORMS[len(shape)](channels).double()
    with torch.no_grad():
        reference.weight.copy_(torch.linspace(0.5, 1.5, channels))
        reference.bias.copy_(torch.linspace(-1, 1, channels))
    sync = ct.SyncBatchNorm(channels).double()
    _copy_affine(sync, reference)

    full = torch.cat(inputs).requires_grad_()
    expected = reference(full)
    (expected * torch.cat(weights)).sum().backward()
    mine = inputs[ct.rank()].clone().requires_grad_()
    output = sync(mine)
    (output * weights[ct.rank()]).sum().backward()

    # Weight and bias gradients stay per rank; their sum is the whole batch's.
    totals = {name: ct.allreduce(getattr(sync, name).grad, name='test.sync_bn.' + name, op=ct.Sum)
              for name in ('weight', 'bias')}

    start = sum(x.shape[0] for x in inputs[:ct.rank()])
    rows = slice(start, start + mine.shape[0])
    torch.testing.assert_close(output, expected[rows], atol=1e-10, rtol=0)
    torch.testing.assert_close(mine.grad, full.grad[rows], atol=1e-10, rtol=0)
    for name, total in totals.items():
        torch.testing.assert_close(total, getattr(reference, name).grad, atol=1e-10, rtol=0)
    torch.testing.assert_close(sync.running_mean, reference.running_mean, atol=1e-12, rtol=0)
    torch.testing.assert_close(sync.running_var, reference.running_var, atol=1e-12, rtol=0)


@pytest.mark.parametrize('momentum', [0.3, None])
def test_running_statistics_and_eval(momentum):
    inputs, _ = _inputs((3, 4, 2), uneven=True)
    reference = torch.nn.BatchNorm1d(4, momentum=momentum).double()
    sync = ct.SyncBatchNorm(4, momentum=momentum).double()
    for step in range(3):
        scaled = [x * (step + 1) for x in inputs]
        reference(torch.cat(scaled))
        sync(scaled[ct.rank()])
    assert sync.num_batches_tracked.item() == 3
    torch.testing.assert_close(sync.running_mean, reference.running_mean, atol=1e-12, rtol=0)
    torch.testing.assert_close(sync.running_var, reference.running_var, atol=1e-12, rtol=0)

    # Evaluation uses the running statistics and talks to nobody.
    reference.eval()
    sync.eval()
    torch.testing.assert_close(sync(inputs[ct.rank()]), reference(inputs[ct.rank()]),
                               atol=1e-12, rtol=0)


def test_without_affine_or_running_stats():
    inputs, weights = _inputs((3, 2, 4), uneven=False)
    reference = torch.nn.BatchNorm1d(2, affine=False, track_running_stats=False).double()
    sync = ct.SyncBatchNorm(2, affine=False, track_running_stats=False).double()
    full = torch.cat(inputs).requires_grad_()
    (reference(full) * torch.cat(weights)).sum().backward()
    mine = inputs[ct.rank()].clone().requires_grad_()
    (sync(mine) * weights[ct.rank()]).sum().backward()

    # Without running statistics even eval() normalizes with the batch's.
    sync.eval()
    reference.eval()
    with torch.no_grad():
        evaluated = sync(inputs[ct.rank()])
        expected = reference(full)

    rows = slice(ct.rank() * 3, ct.rank() * 3 + 3)
    torch.testing.assert_close(mine.grad, full.grad[rows], atol=1e-10, rtol=0)
    torch.testing.assert_close(evaluated, expected[rows], atol=1e-10, rtol=0)


def test_float32_input():
    inputs, _ = _inputs((4, 3, 5), uneven=False)
    inputs = [x.float() for x in inputs]
    reference = torch.nn.BatchNorm1d(3)
    sync = ct.SyncBatchNorm(3)
    expected = reference(torch.cat(inputs))[ct.rank() * 4:(ct.rank() + 1) * 4]
    output = sync(inputs[ct.rank()])
    assert output.dtype == torch.float32
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)


def test_rejects_one_dimensional_input():
    with pytest.raises(ValueError, match='expected at least 2D input'):
        ct.SyncBatchNorm(3)(torch.zeros(3))


def test_process_set(static_process_sets):
    # Each half of the job normalizes over its own ranks' batches.
    evens, odds = static_process_sets
    mine = evens if ct.rank() % 2 == 0 else odds
    inputs, weights = _inputs((3, 2, 4), uneven=True)
    reference = torch.nn.BatchNorm1d(2).double()
    sync = ct.SyncBatchNorm(2, process_set=mine).double()
    full = torch.cat([inputs[r] for r in mine.ranks]).requires_grad_()
    expected = reference(full)
    (expected * torch.cat([weights[r] for r in mine.ranks])).sum().backward()
    x = inputs[ct.rank()].clone().requires_grad_()
    output = sync(x)
    (output * weights[ct.rank()]).sum().backward()

    start = sum(inputs[r].shape[0] for r in mine.ranks if r < ct.rank())
    rows = slice(start, start + x.shape[0])
    torch.testing.assert_close(output, expected[rows], atol=1e-10, rtol=0)
    torch.testing.assert_close(x.grad, full.grad[rows], atol=1e-10, rtol=0)
    torch.testing.assert_close(sync.running_var, reference.running_var, atol=1e-12, rtol=0)
