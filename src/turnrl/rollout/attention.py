"""Attention for a CPU decode step: one query token per row, read as grouped matrix products.

At a decode step every row brings one query token. transformers' SDPA path hands that to
`scaled_dot_product_attention` with a boolean mask, whose CPU kernel is built for long query
blocks: at 64 rows it spends 1.9 ms a layer where two grouped products (queries of the heads that
share a key/value head against that head's keys, then against its values) take 1.3 ms
(docs/rollout.md, "Where a CPU decode step's time goes"). Longer queries (prefill, the trainer's
forward) go to SDPA unchanged. The products read the cache in its own dtype and accumulate the
softmax in float32, so a bfloat16 rollout copy (`rollout.dtype`) keeps float32 attention weights.

The function is registered with transformers under `DECODE_ATTENTION` and switched on only while
`HFEngine` samples (`decode_attention`), so a saved config or a training forward never sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

DECODE_ATTENTION = "turnrl_decode"


def grouped_decode_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scaling: float
) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v for one query token per row, (B, 1, H, D) out.

    query (B, H, 1, D); key, value (B, K, T, D) with H = K * G: the G query heads of key head k are
    rows k*G .. k*G+G-1, as `repeat_kv` lays them out. mask: boolean (B, 1, 1, T), True = attend, or
    None. Hand-worked: one row, one head, keys [[1, 0], [0, 1]], values [[1, 2], [3, 4]], query
    [ln 3, 0], scaling 1 -> scores [ln 3, 0] -> weights [3/4, 1/4] -> output [1.5, 2.5]."""
    b, h, _, d = query.shape
    k = key.shape[1]
    q = query.reshape(b, k, h // k, d)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scaling  # (B, K, G, T)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, -1:, : key.shape[2]], float("-inf"))
    out = torch.matmul(torch.softmax(scores, -1).to(value.dtype), value)  # (B, K, G, D)
    return out.reshape(b, h, 1, d).transpose(1, 2)


def decode_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: grouped products at one query token, SDPA
    otherwise (and for anything the products do not model: dropout, biases, soft-capping)."""
    plain = attention_mask is None or attention_mask.dtype == torch.bool
    simple = dropout == 0.0 and kwargs.get("position_bias") is None and kwargs.get("softcap") is None
    if query.shape[2] != 1 or not plain or not simple:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return grouped_decode_attention(query, key, value, attention_mask, scale), None


AttentionInterface.register(DECODE_ATTENTION, decode_attention_forward)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


@contextmanager
def decode_attention(model: Any) -> Iterator[None]:
    """Within the block, a CPU model that uses SDPA attends through `decode_attention_forward`;
    any other model (a GPU, eager or flash attention) is left as it is."""
    config = model.config
    device = next(model.parameters()).device
    if getattr(config, "_attn_implementation", None) != "sdpa" or device.type != "cpu":
        yield
        return
    model.set_attn_implementation(DECODE_ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation("sdpa")
