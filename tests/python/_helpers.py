"""Shared pieces of the collective.torch layer tests (optimizer, functions, SyncBatchNorm).

Every rank runs the same tests in the same order, so each test issues the
same collectives everywhere; where a test needs another rank's data it
regenerates it from that rank's seed instead of asking for it. conftest.py
has already connected every rank.
"""

import torch

import collective.torch as ct


def rank_batch(rank, shape, seed=0, dtype=torch.float64):
    """The input of `rank` for a test: the same tensor on every process that asks."""
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(shape, generator=generator, dtype=dtype)


def assert_same_on_all_ranks(tensors, name):
    """Fails unless every rank holds bit-identical copies of `tensors`."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors]).unsqueeze(0)
    gathered = ct.allgather(flat, name=name)
    for other in range(ct.size()):
        assert torch.equal(gathered[other], gathered[0]), \
            'rank %d differs from rank 0 in %s' % (other, name)
