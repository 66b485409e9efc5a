"""``ElasticSampler``: splits a dataset across the current workers and, after a re-formation,
splits only the samples not yet processed this epoch across the new set of workers."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sized
from typing import Any

import torch.utils.data

from hora.common import basics


class ElasticSampler(torch.utils.data.Sampler):
    """Like ``DistributedSampler``, but it remembers how many samples the job processed this
    epoch so that a re-formed job goes on where the last commit left off.

    Use it with a ``TorchState`` (which saves, restores and syncs it), call
    ``record_batch(batch_idx, batch_size)`` after each batch and ``set_epoch(epoch)`` at the end
    of each epoch (not the start, so that a partly done epoch is not done again).

    Args:
        dataset: the dataset (its size must not change).
        shuffle: shuffle the indices (the same permutation on every worker).
        seed: shuffle seed, the same on every worker; epoch ``e`` uses ``seed + e``.
    """

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``: forget the processed samples and reshuffle."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Count one batch of ``batch_size`` samples on every worker as processed."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the number of samples processed in it."""
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take ``state_dict``'s epoch and progress and re-split for the current workers."""
        self.epoch = int(state_dict["epoch"])
        self.processed_num = int(state_dict["processed_num"])
        self.reset()

    def reset(self) -> None:
        """Split this epoch's unprocessed samples across the current workers (rank and size of
        the running job; one worker before ``init()``)."""
        if basics.is_initialized():
            self.num_replicas, self.rank = basics.size(), basics.rank()
        else:
            self.num_replicas, self.rank = 1, 0
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        indices = list(self.remaining_indices)
        if indices:
            # pad by wrapping around so that every worker gets num_samples indices
            while len(indices) < self.total_size:
                indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples
