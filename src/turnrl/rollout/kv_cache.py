"""A KV cache allocated once per batch, written in place.

transformers' `DynamicCache` appends each new token's keys and values with `torch.cat`, which
copies the whole cache of every layer at every decode step: for a batch of 64 SmolLM2-135M rows
at 300 tokens of context that is about 0.9 GB moved per token, as much time as the matmuls on a
CPU. Here each layer's storage is allocated once at the batch's final length; a step writes its
new slice in place and hands attention a view of the filled part, so attention sees exactly the
tensors the dynamic cache would (same length, same values) and the loop stays as it is.
"""

from __future__ import annotations

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
            self._refresh()
            return
        n = len(indices)
        moved = (indices != torch.arange(n, device=indices.device)).nonzero()
        if len(moved):
            first = int(moved[0])
            src = indices[first:]
            for buffer in (self._k, self._v):
                buffer[first:n, :, : self.length] = buffer[src, :, : self.length]
        self._k, self._v = self._k[:n], self._v[:n]
        self._refresh()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a preallocated KV cache is never cropped in the rollout loop")


def preallocated_cache(model: Any, capacity: int) -> Cache:
    """A cache for `model` holding `capacity` tokens per row (prompt plus the whole budget)."""
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[PreallocatedLayer(capacity) for _ in range(n_layers)])
