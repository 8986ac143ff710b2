"""What the engine's forward passes did, for the step's profile against the machine's bounds.

A step's `timing_s/gen` mixes prefill (compute-bound: every prompt token is a matmul row) with
decode (memory-bound: each step reads every weight and the KV cache for a few rows) and with the
tools' time. The engine counts each part's work and wall time so that `engine/*` metrics, and
`benchmarks/stage_bounds.py` from them, can say how far each part runs from its own bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields

import torch


@dataclass
class EngineWork:
    """Sums since the last `take()`."""

    prefill_tokens: int = 0
    """Token positions the prefill ran (rows x columns after the cached blocks, padding included)."""
    prefill_new_tokens: int = 0
    """Of those, real tokens (the rest is left padding)."""
    prefill_s: float = 0.0
    """Wall seconds in prefill."""
    decode_steps: int = 0
    """Decode forward passes (each reads every weight once)."""
    decode_rows: int = 0
    """Rows summed over decode steps (each a token's matmul row)."""
    decode_kv_tokens: int = 0
    """Rows x cached positions summed over decode steps (the KV cache each step reads)."""
    decode_s: float = 0.0
    """Wall seconds in decode, sampling and the host's stop checks included."""

    def take(self) -> dict[str, float]:
        """`engine/<field>` for every field, then every field back to zero."""
        out = {f"engine/{f.name}": float(getattr(self, f.name)) for f in fields(self)}
        for f in fields(self):
            setattr(self, f.name, type(getattr(self, f.name))())
        return out


def now(device: torch.device) -> float:
    """A wall clock that has waited for the device's queued work (a GPU runs ahead of the host)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
