"""A decode step with static shapes, compiled once and replayed (`rollout.compile=true`).

On a GPU a small model's decode step is bound by kernel launches, not by reading the weights:
a 0.5B model at batch 8 spends ~20 ms per token where the bandwidth bound is ~0.3 ms. Replaying
the whole step as one CUDA graph removes the launches. A graph needs every shape and address
fixed, so this path keeps, per (batch, capacity) bucket, one set of KV buffers, one attention
mask, one position and one token tensor, all written in place; finished rows ride along masked
(never compacted) and the cache attends over the whole capacity, masked past the current token.

The prefill stays eager (its shapes change with every batch); its keys and values are copied
into the buckets' buffers, each prompt's into its n sample rows.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers.cache_utils import Cache, StaticLayer

from turnrl.models.cache_name import cache_kw

BUCKET = 128  # capacities are rounded up to this, so prompts of similar length share a graph


class BufferLayer(StaticLayer):
    """A static layer over buffers that outlive one generate call (fixed addresses for the graph)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__(max_cache_len=keys.shape[2])
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.batch_size, self.num_heads = keys.shape[:2]
        self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
        self.cumulative_length = torch.zeros((), dtype=torch.long, device=keys.device)
        if not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(self.keys)
            torch._dynamo.mark_static_address(self.values)
            torch._dynamo.mark_static_address(self.cumulative_length)
        self.is_initialized = True


class DecodeBucket:
    """Everything one graph reads and writes, for `batch` rows of up to `capacity` tokens."""

    def __init__(self, model: Any, batch: int, capacity: int, compile_mode: str) -> None:
        cfg = model.config.get_text_config(decoder=True)
        p = next(model.parameters())
        heads = cfg.num_key_value_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        shape = (batch, heads, capacity, head_dim)
        self.layers = [
            BufferLayer(
                torch.zeros(shape, dtype=p.dtype, device=p.device),
                torch.zeros(shape, dtype=p.dtype, device=p.device),
            )
            for _ in range(cfg.num_hidden_layers)
        ]
        self.cache = Cache(layers=self.layers)  # type: ignore[arg-type]
        self.mask = torch.zeros((batch, capacity), dtype=torch.long, device=p.device)
        self.pos = torch.zeros((batch, 1), dtype=torch.long, device=p.device)
        self.token = torch.zeros((batch, 1), dtype=torch.long, device=p.device)
        self.batch, self.capacity, self.model = batch, capacity, model
        self.compile_s = 0.0  # wall time of the calls that compiled (or recorded) the graph
        self.calls = 0

        def step(token: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out = model(
                input_ids=token,
                attention_mask=mask,
                position_ids=pos,
                **cache_kw(self.cache),
                use_cache=True,
            )
            return out.logits[:, -1, :]

        self.step_fn = torch.compile(step, mode=compile_mode, dynamic=False) if compile_mode else step

    def load(
        self, prefill: Cache, prompt_mask: torch.Tensor, next_pos: torch.Tensor, rows: int, n: int
    ) -> None:
        """Copy the prefill's keys and values (`rows` prompts) into the first rows * n buffer rows,
        each prompt's into its n sample rows; unused rows get an all-zero mask and ride along."""
        length = prompt_mask.shape[1]
        b = rows * n
        for layer, src in zip(self.layers, prefill.layers, strict=True):
            assert src.keys is not None and src.values is not None
            layer.keys[:b, :, :length].copy_(src.keys.repeat_interleave(n, dim=0))
            layer.values[:b, :, :length].copy_(src.values.repeat_interleave(n, dim=0))
            layer.cumulative_length.fill_(length)
        self.mask.zero_()
        self.mask[:b, :length] = prompt_mask.repeat_interleave(n, dim=0)
        self.mask[:, length:] = 1  # future positions: the causal mask hides them until they are written
        self.pos.zero_()
        self.pos[:b] = next_pos.repeat_interleave(n, dim=0)

    def decode(self, token: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (rows beyond `token`'s length get a pad) and return the logits."""
        self.token.zero_()
        self.token[: len(token), 0] = token
        first = self.calls < 3  # compilation and graph recording happen in the first calls
        t0 = time.perf_counter()
        logits = self.step_fn(self.token, self.pos, self.mask)
        if first:
            if logits.is_cuda:
                torch.cuda.synchronize()
            self.compile_s += time.perf_counter() - t0
        self.calls += 1
        self.pos += 1
        return logits[: len(token)].clone()  # the graph's output buffer is overwritten by the next replay


def capacity_for(length: int) -> int:
    return -(-length // BUCKET) * BUCKET
