"""Batch: the one container that travels through a training step.

Tensor fields share the first dimension; non-tensor fields are numpy object arrays of the
same length (strings, dicts, ground truths); `meta` holds step-level facts (temperature,
metrics). Every operation returns a new Batch, except `pop` and `union`, which say in
their names that they change it. The fields a step writes are declared in `turnrl/fields.py`;
in strict mode (the test suite) a field it does not declare cannot be written.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from turnrl.fields import check_names


def _as_object_array(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == object:
        return values
    arr = np.empty(len(values), dtype=object)
    arr[:] = list(values)
    return arr


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    non_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.non_tensors = {k: _as_object_array(v) for k, v in self.non_tensors.items()}
        check_names([*self.tensors, *self.non_tensors])
        self._check()

    def _check(self) -> None:
        sizes = {k: v.shape[0] for k, v in self.tensors.items()}
        sizes.update({k: len(v) for k, v in self.non_tensors.items()})
        if len(set(sizes.values())) > 1:
            raise ValueError(f"batch fields disagree on length: {sizes}")

    def __len__(self) -> int:
        for v in self.tensors.values():
            return int(v.shape[0])
        for v in self.non_tensors.values():
            return len(v)
        return 0

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        if key in self.non_tensors:
            return self.non_tensors[key]
        raise KeyError(f"batch has no field '{key}'; it has {sorted(self.keys())}")

    def __setitem__(self, key: str, value: Any) -> None:
        check_names([key])
        if isinstance(value, torch.Tensor):
            self.non_tensors.pop(key, None)
            self.tensors[key] = value
        else:
            self.tensors.pop(key, None)
            self.non_tensors[key] = _as_object_array(value)
        self._check()

    def keys(self) -> list[str]:
        return [*self.tensors, *self.non_tensors]

    # -- selection -------------------------------------------------------------------------
    def select(self, keys: Iterable[str], meta: bool = True) -> Batch:
        keys = list(keys)
        missing = [k for k in keys if k not in self]
        if missing:
            raise KeyError(f"batch has no field(s) {missing}; it has {sorted(self.keys())}")
        return Batch(
            {k: v for k, v in self.tensors.items() if k in keys},
            {k: v for k, v in self.non_tensors.items() if k in keys},
            dict(self.meta) if meta else {},
        )

    def pop(self, keys: Iterable[str]) -> Batch:
        """Remove `keys` from this batch and return them as a new one (meta is copied)."""
        out = self.select(keys)
        for k in [*out.tensors, *out.non_tensors]:
            self.tensors.pop(k, None)
            self.non_tensors.pop(k, None)
        return out

    def union(self, other: Batch) -> Batch:
        """Add `other`'s fields to this batch; a field present in both must be equal."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"cannot union batches of length {len(self)} and {len(other)}")
        for k, v in other.tensors.items():
            if k in self.tensors and not torch.equal(self.tensors[k], v):
                raise ValueError(f"union conflict: tensor field '{k}' differs between the batches")
            self.tensors[k] = v
        for k, v in other.non_tensors.items():
            if k in self.non_tensors and not _arrays_equal(self.non_tensors[k], v):
                raise ValueError(f"union conflict: field '{k}' differs between the batches")
            self.non_tensors[k] = v
        for k, v in other.meta.items():
            self.meta.setdefault(k, v)
        self._check()
        return self

    # -- reshaping -------------------------------------------------------------------------
    def index(self, idx: Sequence[int] | torch.Tensor | np.ndarray | slice) -> Batch:
        if isinstance(idx, slice):
            t_idx: Any = idx
            n_idx: Any = idx
        else:
            t_idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
            n_idx = np.asarray(idx, dtype=np.int64)
        return Batch(
            {k: v[t_idx] for k, v in self.tensors.items()},
            {k: v[n_idx] for k, v in self.non_tensors.items()},
            dict(self.meta),
        )

    def reorder(self, order: Sequence[int] | torch.Tensor) -> Batch:
        order = torch.as_tensor(order, dtype=torch.long)
        if sorted(order.tolist()) != list(range(len(self))):
            raise ValueError("reorder needs a permutation of range(len(batch))")
        return self.index(order)

    def repeat(self, n: int, interleave: bool = True) -> Batch:
        """n copies of every row: interleaved A,A,B,B (a prompt's samples adjacent) or tiled A,B,A,B."""
        if n < 1:
            raise ValueError(f"repeat needs n >= 1, got {n}")
        rows = np.arange(len(self))
        idx = np.repeat(rows, n) if interleave else np.tile(rows, n)
        return self.index(idx)

    def split(self, size: int) -> list[Batch]:
        """Consecutive pieces of `size` rows (the last may be shorter)."""
        if size < 1:
            raise ValueError(f"split needs size >= 1, got {size}")
        return [self.index(slice(i, i + size)) for i in range(0, len(self), size)]

    def chunk(self, chunks: int) -> list[Batch]:
        """`chunks` pieces of equal length; the batch length must divide evenly."""
        if chunks < 1 or len(self) % chunks:
            raise ValueError(f"cannot chunk a batch of {len(self)} rows into {chunks} equal pieces")
        return self.split(len(self) // chunks)

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        if not batches:
            raise ValueError("concat needs at least one batch")
        keys = [set(b.keys()) for b in batches]
        if any(k != keys[0] for k in keys):
            raise ValueError(f"concat needs the same fields in every batch, got {[sorted(k) for k in keys]}")
        first = batches[0]
        return Batch(
            {k: torch.cat([b.tensors[k] for b in batches]) for k in first.tensors},
            {k: np.concatenate([b.non_tensors[k] for b in batches]) for k in first.non_tensors},
            dict(first.meta),
        )

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            {k: v.to(device) for k, v in self.tensors.items()}, dict(self.non_tensors), dict(self.meta)
        )

    def __repr__(self) -> str:
        t = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self.tensors.items())
        n = ", ".join(self.non_tensors)
        return f"Batch(len={len(self)}, tensors=[{t}], non_tensors=[{n}])"


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if len(a) != len(b):
        return False
    return all(_values_equal(x, y) for x, y in zip(a, b, strict=True))


def _values_equal(x: Any, y: Any) -> bool:
    eq = x == y
    if isinstance(eq, np.ndarray):
        return bool(eq.all())
    return bool(eq)


# -- episodes: rows that belong together ------------------------------------------------------------
# An agent episode that forked at template drift gives several adjacent rows; `episode_last` marks
# the last of each (turnrl/fields.py). A batch without it has one row per episode.


def episode_ends(batch: Batch) -> np.ndarray:
    """The row index after each episode's last row, in order (`1..len` without forks)."""
    if "episode_last" not in batch:
        return np.arange(1, len(batch) + 1)
    return np.flatnonzero(np.asarray(batch["episode_last"], dtype=bool)) + 1


def episode_of_rows(batch: Batch) -> np.ndarray:
    """Each row's episode number (0, 1, ...): the count of episode ends before it."""
    return np.searchsorted(episode_ends(batch), np.arange(len(batch)), side="right")


def first_episodes(batch: Batch, k: int) -> Batch:
    """The rows of the first `k` episodes (`batch.index(slice(0, k))` without forks)."""
    ends = episode_ends(batch)
    stop = 0 if k < 1 else int(ends[k - 1]) if k <= len(ends) else len(batch)
    return batch.index(slice(0, stop))


def split_episodes(batch: Batch, size: int) -> list[Batch]:
    """Consecutive pieces of `size` episodes, an episode's rows never split (`batch.split(size)`
    without forks)."""
    if size < 1:
        raise ValueError(f"split needs size >= 1, got {size}")
    ends = episode_ends(batch)
    cuts = [0, *(int(e) for e in ends[size - 1 :: size]), len(batch)]
    return [batch.index(slice(a, b)) for a, b in itertools.pairwise(cuts) if b > a]
