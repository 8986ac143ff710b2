"""The keys and values a batch's rows finished with, kept for the next prompts that extend them.

An agent episode's next prompt is its last prompt, the tokens the model sampled, and the tool's
observation, token for token (the loop never re-encodes). `HFEngine` puts each finished row here
(the prompt and the sampled tokens it fed back, with their keys and values per layer) and, at the
next call, takes for each prompt the longest stored sequence it starts with: only the rest is
prefilled (`prefix.prefix_layout`). Stored keys and values belong to the weights that computed them:
the engine clears the store at every weight sync.

Lookup is by length and the last `TAIL` tokens, then checked token by token, so a prompt costs a
dictionary probe per distinct stored length, not a comparison with every entry. An entry serves
once (the episode's next turn stores its own, longer one); the oldest go first past `max_bytes`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

TAIL = 8
"""Tokens of a sequence's end that index it (with its length)."""


@dataclass
class Entry:
    ids: list[int]
    """The tokens whose keys and values these are, from position 0."""
    keys: list[torch.Tensor]
    """Per layer, (kv heads, len(ids), head dim)."""
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def _index(ids: list[int], length: int) -> tuple[int, tuple[int, ...]]:
    return length, tuple(ids[max(0, length - TAIL) : length])


class PrefixStore:
    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"a prefix store holds at least 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, tuple[int, ...]], list[Entry]] = OrderedDict()
        self.lengths: dict[int, int] = {}  # stored length -> how many entries have it
        self.nbytes = 0
        self.hits = 0
        self.reused_tokens = 0

    def put(self, entry: Entry) -> None:
        """Keep `entry` (dropping the oldest past `max_bytes`); an entry alone over it is not kept."""
        if not entry.ids or entry.nbytes > self.max_bytes:
            return
        key = _index(entry.ids, len(entry.ids))
        self.entries.setdefault(key, []).append(entry)
        self.entries.move_to_end(key)
        self.lengths[len(entry.ids)] = self.lengths.get(len(entry.ids), 0) + 1
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            self._pop(next(iter(self.entries)))

    def take(self, prompt: list[int]) -> Entry | None:
        """The longest stored entry `prompt` starts with, shorter than `prompt` (the prefill needs
        one new token), removed from the store; None when there is none."""
        entry = self._remove_longest(prompt)
        if entry is not None:
            self.hits += 1
            self.reused_tokens += len(entry.ids)
        return entry

    def discard(self, sequence: list[int]) -> None:
        """Drop what `take(sequence)` would return, uncounted: `sequence` ended (an agent episode
        that answered), so no later prompt extends it and its keys and values only hold memory."""
        self._remove_longest(sequence)

    def _remove_longest(self, prompt: list[int]) -> Entry | None:
        for length in sorted((n for n in self.lengths if n < len(prompt)), reverse=True):
            key = _index(prompt, length)
            for entry in self.entries.get(key, []):
                if entry.ids == prompt[:length]:
                    self._pop(key, entry)
                    return entry
        return None

    def _pop(self, key: tuple[int, tuple[int, ...]], entry: Entry | None = None) -> None:
        bucket = self.entries[key]
        entry = entry if entry is not None else bucket[0]
        bucket.remove(entry)
        if not bucket:
            del self.entries[key]
        n = len(entry.ids)
        self.lengths[n] -= 1
        if not self.lengths[n]:
            del self.lengths[n]
        self.nbytes -= entry.nbytes

    def clear(self) -> None:
        self.entries.clear()
        self.lengths.clear()
        self.nbytes = 0


@dataclass
class Restored:
    """What a forward batch takes from the store: per prompt row its entry (or None) and how many of
    its tokens precede its new block (`prefix.prefix_layout`'s `cached`, at least `shared`)."""

    found: list[Entry | None]
    cached: list[int]

    def width(self, shared: int) -> int:
        """Columns of the cached block."""
        return max(c - shared for c in self.cached)

    def fill(self, head: Any, fresh: Any, shared: int) -> Any:
        """`fresh` (an empty preallocated cache) holding, for every row, the shared prefix's keys and
        values from `head` (the one-row cache of the shared columns; None when `shared` is 0) and
        its entry's after them, right-aligned in the cached block; the masked gaps hold zeros."""
        b, total = len(self.cached), shared + self.width(shared)
        for layer_no, layer in enumerate(fresh.layers):
            blocks = []
            for part in ("keys", "values"):
                if head is not None:
                    ref = getattr(head.layers[layer_no], part)
                else:
                    ref = next(getattr(e, part)[layer_no][None] for e in self.found if e is not None)
                full = ref.new_zeros((b, ref.shape[1], total, ref.shape[3]))
                if head is not None:
                    full[:, :, :shared] = ref[:, :, :shared]
                for i, (entry, c) in enumerate(zip(self.found, self.cached, strict=True)):
                    if entry is not None and c > shared:
                        full[i, :, total - (c - shared) :] = getattr(entry, part)[layer_no][:, shared:c]
                blocks.append(full)
            layer.update(*blocks)
        return fresh


def store_rows(
    store: PrefixStore, rows: list[list[int]], n: int, loop: Any, out_rows: list[int], batch: list[int]
) -> None:
    """`DecodeLoop`'s `keep`: put each leaving row in `store`, its prompt (`rows`, `n` output rows
    each) and the sampled tokens it fed back, all but the last it returns (a stop string may cut
    them), with their keys and values (the real columns of its cache row). A finished row riding
    along has fed its last token too; leaving it out keeps every entry shorter than its episode, so
    that `PrefixStore.discard` finds it when the episode ends."""
    layers = loop.cache.layers
    for r, j in zip(out_rows, batch, strict=True):
        prompt = rows[r // n]
        real = loop.mask[j].nonzero().squeeze(-1)
        returned = loop.stopped.get(r, int(loop.length[r]))
        fed = max(0, min(len(real) - len(prompt), returned - 1))
        cols = real[: len(prompt) + fed]
        keys = [layer.keys[j][:, cols] for layer in layers]
        values = [layer.values[j][:, cols] for layer in layers]
        store.put(Entry(prompt + loop.tokens[r, :fed].tolist(), keys, values))
