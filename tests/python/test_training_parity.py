"""N ranks with DistributedOptimizer train exactly like one process with the whole batch.

Each step, rank r trains on rows [r*B, (r+1)*B) of a global batch of N*B
rows; every rank also trains a local reference model on all N*B rows with the
plain optimizer. Averaged per-rank mean-loss gradients are the gradient of the
global mean loss, so the weights must agree after every step.
"""

import pytest
import torch

import collective.torch as ct
from _helpers import assert_same_on_all_ranks, rank_batch

_PER_RANK = 4
_STEPS = 5


def _model(batch_norm):
    torch.manual_seed(11)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3), batch_norm(3), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 4)).double()


def _global_batch(step):
    images = rank_batch(step, (ct.size() * _PER_RANK, 1, 6, 6), seed=5)
    labels = torch.randint(0, 4, (ct.size() * _PER_RANK,),
                           generator=torch.Generator().manual_seed(step))
    return images, labels


_CASES = {
    'sgd_momentum': dict(optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                              weight_decay=1e-3)),
    'adam': dict(optimizer=lambda p: torch.optim.Adam(p, lr=0.01)),
    # Accumulating micro-batches changes batch-norm statistics, so this case
    # normalizes nothing.
    'groups_and_accumulation': dict(optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5),
                                    options=dict(groups=2, backward_passes_per_step=2),
                                    batch_norm=torch.nn.Identity),
}


@pytest.mark.parametrize('case', sorted(_CASES))
def test_matches_single_process_training(case):
    spec = _CASES[case]
    local_norm = spec.get('batch_norm', torch.nn.BatchNorm2d)
    sync_norm = spec.get('batch_norm', ct.SyncBatchNorm)
    passes = spec.get('options', {}).get('backward_passes_per_step', 1)

    reference = _model(local_norm)
    reference_optimizer = spec['optimizer'](reference.parameters())
    model = _model(sync_norm)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(ct.rank())  # start apart: the broadcast must fix it
    ct.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = ct.DistributedOptimizer(spec['optimizer'](model.parameters()),
                                        named_parameters=model.named_parameters(),
                                        **spec.get('options', {}))
    loss_fn = torch.nn.CrossEntropyLoss()

    for step in range(_STEPS):
        images, labels = _global_batch(step)
        reference_optimizer.zero_grad()
        loss_fn(reference(images), labels).backward()
        reference_optimizer.step()

        rows = slice(ct.rank() * _PER_RANK, (ct.rank() + 1) * _PER_RANK)
        optimizer.zero_grad()
        for micro_images, micro_labels in zip(images[rows].chunk(passes),
                                              labels[rows].chunk(passes)):
            (loss_fn(model(micro_images), micro_labels) / passes).backward()
        optimizer.step()

    assert_same_on_all_ranks(list(model.state_dict().values()), 'test.parity.' + case)
    worst = 0.0
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        assert got.shape == want.shape, name
        worst = max(worst, (got.double() - want.double()).abs().max().item())
    assert worst < 1e-5, 'largest weight difference %g' % worst
