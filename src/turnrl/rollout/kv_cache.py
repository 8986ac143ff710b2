"""A KV cache allocated once per batch, written in place.

transformers' `DynamicCache` appends each new token's keys and values with `torch.cat`, which
copies the whole cache of every layer at every decode step: for a batch of 64 SmolLM2-135M rows
at 300 tokens of context that is about 0.9 GB moved per token, as much time as the matmuls on a
CPU. Here each layer's storage is allocated once at the batch's final length; a step writes its
new slice in place and hands attention a view of the filled part, so attention sees exactly the
tensors the dynamic cache would (same length, same values) and the loop stays as it is.

That view is not contiguous (each row's block is `capacity` long), and torch's CPU product in
bfloat16 copies such an operand whole before it multiplies: at a decode step of 48 rows over 300 of
their own positions that copy was two thirds of attention's time. So when decoding starts the
prompt's positions, which no step changes, are copied once into tensors of their own (`freeze`), and
the decode attention reads them from there and only the positions sampled since from the view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in a `[batch, heads, capacity, head_dim]` buffer; `keys` and
    `values` are views of its first `length` positions, so every `DynamicLayer` method that reads
    them (sequence length, mask sizes) works unchanged."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.frozen: tuple[torch.Tensor, torch.Tensor] | None = None
        """Contiguous copies of the keys and values of positions `frozen_start` .. `frozen_start` +
        their length, made by `freeze`, kept row for row with the buffer; None: not frozen."""
        self.frozen_start = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self._k is None:
            self.dtype, self.device = key_states.dtype, key_states.device
            b, h, _, dk = key_states.shape
            self._k = key_states.new_empty((b, h, self.capacity, dk))
            self._v = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))
            self.is_initialized = True
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache holds {self.capacity} tokens; {end} were written")
        assert self._v is not None
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._refresh()
        return self.keys, self.values  # type: ignore[return-value]

    def _refresh(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def batch_repeat_interleave(self, repeats: int) -> None:
        # only the filled part is copied: the rest of the capacity is the budget still to be written
        if self._k is not None and self._v is not None:
            self._k, self._v = (self._repeat(t, repeats) for t in (self._k, self._v))
            self._refresh()
        self.map_frozen(lambda t: t.repeat_interleave(repeats, 0))

    def _repeat(self, buffer: torch.Tensor, repeats: int) -> torch.Tensor:
        b, h, capacity, d = buffer.shape
        out = buffer.new_empty((b * repeats, h, capacity, d))
        out[:, :, : self.length] = buffer[:, :, : self.length].repeat_interleave(repeats, dim=0)
        return out

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows `indices`. Ascending ones (the decode loop's compaction) are kept in place:
        only the rows that move are copied, and only their filled positions; the unwritten capacity
        (the budget still to come) and the rows before the first dropped one stay where they are.
        Anything else (repeats, a new order) copies whole rows."""
        if self._k is None or self._v is None:
            return
        if len(indices) > 1 and not bool((indices[1:] > indices[:-1]).all()):  # repeats, a new order
            self._k, self._v = self._k[indices], self._v[indices]
            self.map_frozen(lambda t: t[indices])
            self._refresh()
            return
        n = len(indices)
        moved = (indices != torch.arange(n, device=indices.device)).nonzero()
        if len(moved):
            first = int(moved[0])
            src = indices[first:]
            for buffer in (self._k, self._v):
                buffer[first:n, :, : self.length] = buffer[src, :, : self.length]
            for buffer in self.frozen or ():
                buffer[first:n] = buffer[src]
        self._k, self._v = self._k[:n], self._v[:n]
        self.map_frozen(lambda t: t[:n])  # a leading slice: still contiguous
        self._refresh()

    def map_frozen(self, rows: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Apply the same row selection to the frozen keys and values as to the buffer (none: nothing)."""
        if self.frozen is not None:
            self.frozen = (rows(self.frozen[0]), rows(self.frozen[1]))

    def freeze(self, start: int) -> None:
        """Copy positions `start` .. the current length (the prompt's, which later steps only read)
        into contiguous tensors that the decode attention reads instead of the buffer's view."""
        if self._k is None or self._v is None or start >= self.length:
            return
        self.frozen = tuple(t[:, :, start : self.length].contiguous() for t in (self._k, self._v))  # type: ignore[assignment]
        self.frozen_start = start

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a preallocated KV cache is never cropped in the rollout loop")


def freeze_pays(cache: Any) -> bool:
    """Whether `freeze` saves time: a preallocated cache on a CPU in a reduced precision (a float32
    product reads the strided view without a copy, and a GPU's attention never reads `frozen`)."""
    layers = getattr(cache, "layers", None) or []
    first = layers[0] if layers else None
    if not isinstance(first, PreallocatedLayer) or first._k is None:
        return False
    return first._k.device.type == "cpu" and first._k.dtype in (torch.bfloat16, torch.float16)


def freeze(cache: Any, start: int) -> Callable[[int], tuple[int, torch.Tensor, torch.Tensor] | None]:
    """`PreallocatedLayer.freeze(start)` for every layer of `cache`; returns the function from a
    layer's index to its (start, keys, values) that the decode attention reads (`FROZEN_KV`)."""
    for layer in cache.layers:
        layer.freeze(start)

    def frozen_of(index: int) -> tuple[int, torch.Tensor, torch.Tensor] | None:
        layer = cache.layers[index]
        return None if layer.frozen is None else (layer.frozen_start, *layer.frozen)

    return frozen_of


def preallocated_cache(model: Any, capacity: int) -> Cache:
    """A cache for `model` holding `capacity` tokens per row (prompt plus the whole budget)."""
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[PreallocatedLayer(capacity) for _ in range(n_layers)])
