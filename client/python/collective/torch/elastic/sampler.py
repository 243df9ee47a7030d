"""``ElasticSampler``: Horovod's sampler that shares out, among however many ranks the job has
now, the samples of the epoch not yet processed."""

import math
import random

import torch

from collective.common.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Each rank's share of the samples of this epoch that no rank has processed yet.

    Record what was processed (``record_batch`` or ``record_indices``) and
    keep the sampler in a ``TorchState``: when the job re-forms, the ranks
    pool what they processed and the rest is divided among the new ranks.
    The shares are equal in length: the last samples repeat to fill them.

    Arguments:
        dataset: What to sample (its ``len()`` is used).
        shuffle: Shuffle the samples, the same way on every rank (by
                 ``seed + epoch``).
        seed: The seed of the shuffle.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch ``epoch``: nothing of it is processed yet."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records this rank's batch ``batch_idx`` (of ``batch_size`` samples) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Records ``indices`` (samples of the dataset) as processed."""
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """The samples of this rank's batch ``batch_idx``."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        """The epoch and the indices processed so far in it (a copy)."""
        return {'epoch': self.epoch, 'processed_indices': set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        """Takes the epoch and processed indices of ``state_dict`` and shares out again what is
        left."""
        self.epoch = state_dict['epoch']
        self.processed_indices = set(state_dict['processed_indices'])
        self.reset()

    def reset(self):
        """Shares out again what is left of the epoch, among the ranks of the job as it is now."""
        self.num_replicas = size()
        self.rank = rank()
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(remaining)
        self.num_samples = math.ceil(len(remaining) / self.num_replicas)
        total = self.num_samples * self.num_replicas
        remaining += remaining[:total - len(remaining)]
        self.remaining_indices = remaining
        self.indices = remaining[self.rank:total:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
