"""Attention for a CPU decode step: one query token per row, read as grouped matrix products.

At a decode step every row brings one query token. transformers' SDPA path hands that to
`scaled_dot_product_attention` with a boolean mask, whose CPU kernel is built for long query
blocks: at 64 rows it spends 1.9 ms a layer where two grouped products (queries of the heads that
share a key/value head against that head's keys, then against its values) take 1.3 ms
(docs/rollout.md, "Where a CPU decode step's time goes"). Longer queries (prefill, the trainer's
forward) go to SDPA unchanged. The products read the cache in its own dtype and accumulate the
softmax in float32, so a bfloat16 rollout copy (`rollout.dtype`) keeps float32 attention weights.

The keys and values of the prefix every row shares (`prefix.shared_prefix_length`: the system prompt
and worked example an agent's prompts begin with, copied to every row at prefill) are the same in
every row, yet a per-row product reads each row's copy: at 48 rows and 540 cached positions, 200 of
them shared, that is a third of the bytes attention moves, and attention is bound by them (10 ms a
layer, about 4 GB/s). Told how many leading positions are shared (`SHARED_KV`, a keyword the model's
forward hands every attention call), the function reads them once, from the first row, as one product
of all the rows' queries, then the rest per row, and takes one softmax over both.

The same products in bfloat16 copy an operand whose rows are not laid out back to back, as the
preallocated cache's view of its filled part is not (`kv_cache.freeze`): told where a copy of the
prompt's own positions made when decoding began is (`FROZEN_KV`), the function reads those from it
and only the positions sampled since from the view, again under one softmax.

The function is registered with transformers under `DECODE_ATTENTION` and switched on only while
`HFEngine` samples (`decode_attention`), so a saved config or a training forward never sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

DECODE_ATTENTION = "turnrl_decode"
SHARED_KV = "turnrl_shared_kv"
"""The forward keyword naming how many leading cached positions hold the same keys and values in every
row (0 or absent: none)."""
FROZEN_KV = "turnrl_frozen_kv"
"""The forward keyword holding a function from a layer's index to its (start, keys, values): the
contiguous keys and values of the positions from `start` on that decoding began with
(`kv_cache.PreallocatedLayer.freeze`), or None (absent: none)."""

Frozen = tuple[int, torch.Tensor, torch.Tensor]


def grouped_decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    shared: int = 0,
    frozen: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v for one query token per row, (B, 1, H, D) out.

    query (B, H, 1, D); key, value (B, K, T, D) with H = K * G: the G query heads of key head k are
    rows k*G .. k*G+G-1, as `repeat_kv` lays them out. mask: boolean (B, 1, 1, T), True = attend, or
    None. `shared`: the first `shared` positions hold the same keys and values in every row (and
    every row attends them); they are read from row 0 alone. `frozen`: (keys, values) (B, K, F, D)
    equal to positions `shared` .. `shared` + F of `key` and `value`, read from there instead.
    Hand-worked: one row, one head, keys [[1, 0], [0, 1]], values [[1, 2], [3, 4]], query [ln 3, 0],
    scaling 1 -> scores [ln 3, 0] -> weights [3/4, 1/4] -> output [1.5, 2.5]."""
    b, h, _, d = query.shape
    k = key.shape[1]
    q = query.reshape(b, k, h // k, d)
    start = shared + (frozen[0].shape[2] if frozen is not None else 0)
    blocks = [*([frozen] if frozen is not None else []), (key[:, :, start:], value[:, :, start:])]
    parts = [torch.matmul(q, bk.transpose(-1, -2)) for bk, _ in blocks]  # (B, K, G, block length)
    if shared:
        parts.insert(0, _all_rows(q, key[0, :, :shared].transpose(-1, -2)))
    scores = (torch.cat(parts, -1) if len(parts) > 1 else parts[0]).float() * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, -1:, : key.shape[2]], float("-inf"))
    weights = torch.softmax(scores, -1).to(value.dtype)
    out = _all_rows(weights[..., :shared], value[0, :, :shared]) if shared else None
    at = shared
    for bk, bv in blocks:
        n = bk.shape[2]
        part = torch.matmul(weights[..., at : at + n], bv)  # (B, K, G, D)
        out, at = (part if out is None else out + part), at + n
    assert out is not None
    return out.reshape(b, h, 1, d).transpose(1, 2)


def _all_rows(x: torch.Tensor, per_head: torch.Tensor) -> torch.Tensor:
    """x (B, K, G, M) times one (M, N) matrix per key head, (K, M, N), for every row: one product of
    B*G rows a head, which reads the matrix once instead of once a row. (B, K, G, N) out."""
    b, k, g, m = x.shape
    rows = x.transpose(0, 1).reshape(k, b * g, m)
    return torch.matmul(rows, per_head).reshape(k, b, g, -1).transpose(0, 1)


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
    shared = int(kwargs.get(SHARED_KV) or 0)
    return grouped_decode_attention(
        query, key, value, attention_mask, scale, shared, _frozen(module, kwargs.get(FROZEN_KV), shared)
    ), None


def _frozen(
    module: torch.nn.Module, frozen_of: Callable[[int], Frozen | None] | None, shared: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The layer's frozen keys and values when they begin where the shared positions end."""
    index = getattr(module, "layer_idx", None)
    found = frozen_of(index) if frozen_of is not None and index is not None else None
    if found is None or found[0] != shared:
        return None
    return found[1], found[2]


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


def reads_shared_kv(model: Any) -> bool:
    """True while `model` attends through `decode_attention_forward`, the one attention function that
    reads `SHARED_KV` (another could refuse an unknown keyword)."""
    return getattr(model.config, "_attn_implementation", None) == DECODE_ATTENTION
