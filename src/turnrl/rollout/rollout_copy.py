"""A lower-precision copy of the policy for sampling (`rollout.dtype`), refreshed when it changes.

Decoding a small batch multiplies a few rows by every weight once per token: a bfloat16 copy reads
half the bytes and, on a CPU with bfloat16 instructions (AVX512-BF16, AMX), multiplies at twice the
float32 rate. The trainer keeps float32 weights; the sampled tokens' log-probs then come from a
slightly different policy, which the trainer's forward sees as a gap between `rollout_log_probs` and
its own (`rollout_corr/*` metrics) and which TIS/MIS (`algorithm.rollout_correction`) or the PPO
ratio against the rollout's log-probs correct, as with any engine that is not the trainer's module.
"""

from __future__ import annotations

import copy

import torch

from turnrl.config.checks import DTYPES
from turnrl.models.loader import resolve_dtype
from turnrl.rollout.packed_linear import can_pack, pack_linears

ROLLOUT_DTYPES = DTYPES[1:]  # `model.dtype`'s names but `auto`


def torch_dtype(name: str) -> torch.dtype:
    """`bfloat16` -> torch.bfloat16, for the names `rollout.dtype` accepts."""
    if name not in ROLLOUT_DTYPES:
        raise ValueError(
            f"rollout.dtype={name!r}: use one of {', '.join(ROLLOUT_DTYPES)} (or empty: the model's own)"
        )
    return resolve_dtype(name, torch.device("cpu"))


def samples_in_model_precision(rollout_dtype: str, model_dtype: str, device: torch.device) -> bool:
    """Whether `rollout.dtype` leaves the `hf` engine on the policy's own weights: empty, or the
    precision `model.dtype` resolves to on `device` (`auto` is bfloat16 on a GPU, float32 on a CPU)."""
    return not rollout_dtype or torch_dtype(rollout_dtype) == resolve_dtype(model_dtype, device)


class RolloutCopy:
    """The policy's parameters cast to `dtype` in a module of their own; buffers (rotary
    frequencies and the like) keep their precision. `refresh()` copies the source's current
    weights in place, so anything built around the copy (compiled decode steps) stays valid.

    On a CPU with oneDNN's bfloat16 support the copy's linear layers read weights laid out once for
    oneDNN (`packed_linear`, tuned for `rows_hint` rows): the same products, faster at a few rows."""

    def __init__(self, source: torch.nn.Module, dtype: torch.dtype, rows_hint: int = 16) -> None:
        self.source, self.dtype = source, dtype
        self.module = copy.deepcopy(source)
        for p in self.module.parameters():
            p.requires_grad_(False)
            p.data = p.data.to(dtype)
        self.module.eval()
        # a copy in the policy's own float32 (`turnrl live serve`) keeps the policy's numbers exactly
        low = dtype == torch.bfloat16
        self.packed = pack_linears(self.module, rows_hint) if low and can_pack(self.module, dtype) else []

    @torch.no_grad()
    def refresh(self) -> None:
        for dst, src in zip(self.module.parameters(), self.source.parameters(), strict=True):
            dst.copy_(src)  # casts
        for layer in self.packed:
            layer.pack()
