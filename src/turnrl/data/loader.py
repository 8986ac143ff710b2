"""A seeded, resumable loader: its position is part of every checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from turnrl.batch import Batch
from turnrl.data.dataset import DataError, Example
from turnrl.tensors import left_pad, position_ids_from_mask


def collate(examples: list[Example], pad_id: int) -> Batch:
    ids, mask = left_pad([e.prompt_ids for e in examples], pad_id)
    return Batch(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        non_tensors={
            "data_source": [e.data_source for e in examples],
            "ground_truth": [e.ground_truth for e in examples],
            "extra_info": [e.extra_info for e in examples],
            "index": [e.index for e in examples],
            "raw_prompt": [e.raw_prompt for e in examples],
        },
    )


class StatefulLoader:
    """Yields full batches (the last partial batch of an epoch is dropped) in a seeded order.

    The order of epoch e is a permutation drawn from (seed, e), so restoring `epoch` and
    `position` reproduces exactly the batches an uninterrupted run would have seen.
    """

    def __init__(
        self, examples: list[Example], batch_size: int, pad_id: int, seed: int, shuffle: bool = True
    ):
        if len(examples) < batch_size:
            raise DataError(f"{len(examples)} usable prompts are fewer than one batch of {batch_size}")
        self.examples = examples
        self.batch_size = batch_size
        self.pad_id = pad_id
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0  # batches already yielded in this epoch

    def __len__(self) -> int:
        return len(self.examples) // self.batch_size

    def _order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.examples))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.examples))

    def epoch_batches(self) -> Iterator[Batch]:
        """The remaining batches of the current epoch; afterwards the loader moves to the next."""
        order = self._order(self.epoch)
        while self.position < len(self):
            rows = order[self.position * self.batch_size : (self.position + 1) * self.batch_size]
            self.position += 1
            yield collate([self.examples[i] for i in rows], self.pad_id)
        self.epoch += 1
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position, self.seed = int(state["epoch"]), int(state["position"]), int(state["seed"])


def batches_of(examples: list[Example], batch_size: int, pad_id: int) -> Iterator[Batch]:
    """Every example once, in order, in batches (validation)."""
    for i in range(0, len(examples), batch_size):
        yield collate(examples[i : i + batch_size], pad_id)
