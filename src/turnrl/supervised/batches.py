"""Batches of rows of similar length, and micro-batches padded only to their own longest row.

Chat data mixes one-line answers with long tool-using episodes; padded to a batch's longest row,
most of the compute would go to padding. So each epoch's shuffled rows are sorted by length
within windows of `data.length_window` batches and cut into batches, whose order within the window
is shuffled again (long and short batches still alternate at random); each batch is itself sorted,
so its micro-batches, cut in order, hold neighbours in length and are padded right to their own
longest row only. The loss does not depend on how a step is cut (`losses.py`), only on which rows
it holds.

The order of epoch e is drawn from (seed, e) alone, so restoring `epoch` and `position` reproduces
exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")


def epoch_batches(
    lengths: Sequence[int], batch_size: int, window: int, rng: np.random.Generator | None
) -> list[list[int]]:
    """One epoch's batches as lists of row indices; `rng` None keeps the data order (no shuffling).
    The last batch may be short: every row is seen once per epoch."""
    n = len(lengths)
    order = rng.permutation(n).tolist() if rng is not None else list(range(n))
    span = batch_size * max(window, 1)
    batches: list[list[int]] = []
    for start in range(0, n, span):
        chunk = order[start : start + span]
        if window > 0:
            chunk.sort(key=lambda i: lengths[i])  # stable: rows of one length keep the shuffled order
        group = [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
        if window > 1 and rng is not None:
            group = [group[k] for k in rng.permutation(len(group))]
        batches += group
    return batches


class LengthGroupedLoader:
    """Yields each epoch's batches (row indices) in a seeded order; its position is checkpointed."""

    def __init__(self, lengths: Sequence[int], batch_size: int, window: int, seed: int, shuffle: bool = True):
        self.lengths = list(lengths)
        self.batch_size, self.window, self.seed, self.shuffle = batch_size, window, seed, shuffle
        self.epoch = 0
        self.position = 0  # batches already yielded in this epoch

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def epoch_batches(self) -> Iterator[list[int]]:
        """The remaining batches of the current epoch; afterwards the loader moves to the next."""
        rng = np.random.default_rng([self.seed, self.epoch]) if self.shuffle else None
        batches = epoch_batches(self.lengths, self.batch_size, self.window, rng)
        while self.position < len(batches):
            self.position += 1
            yield batches[self.position - 1]
        self.epoch += 1
        self.position = 0

    def forever(self) -> Iterator[list[int]]:
        while True:  # epochs roll over; a resume at an epoch's end simply starts the next one
            yield from self.epoch_batches()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position, self.seed = int(state["epoch"]), int(state["position"]), int(state["seed"])


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive micro-batches of `size` items (the last may be short)."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask), padded on the right to the longest of `seqs` and no further."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[r, : len(s)] = 1
    return ids, mask
