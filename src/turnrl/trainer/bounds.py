"""A step's stages against the machine's bounds: how long each would take if it ran at the
machine's measured matmul rate (compute-bound work) or copy bandwidth (memory-bound work).

Prefill, the update and the log-prob passes are compute-bound: every token is a row of every
weight's product, 2 FLOP per weight forward and 4 more backward. A decode step reads every weight
and the KV cache of its rows for a few rows of arithmetic: its bound is the larger of the two,
bytes over bandwidth or FLOPs over the matmul rate (a roofline over the stage's totals, so a
lower bound on its time). Attention's own products and the element-wise work are left out: the
bounds are what the weights' products alone cost, and a stage near 100 % has nothing left to win
without doing less work. `benchmarks/stage_bounds.py` measures the rates and prints the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """The sizes the bounds need, from the model (`of`)."""

    trunk_params: int
    """Weights of the layers' products (every linear layer but the output one)."""
    head_params: int
    """The output layer's vocabulary x hidden weights."""
    weight_bytes: int
    """Every parameter as the engine holds it (what one decode step reads)."""
    kv_bytes_per_token: int
    """Keys and values of one position over all layers, in the engine's precision."""

    @classmethod
    def of(cls, model: Any, element_size: int) -> ModelShape:
        """`model`'s shape with its weights and cache held at `element_size` bytes a number."""
        import torch

        cfg = model.config.get_text_config(decoder=True)
        head = model.get_output_embeddings().weight.numel()
        linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        return cls(
            trunk_params=linear - head,
            head_params=head,
            weight_bytes=sum(p.numel() for p in model.parameters()) * element_size,
            kv_bytes_per_token=2 * cfg.num_hidden_layers * kv_heads * head_dim * element_size,
        )


@dataclass(frozen=True)
class Rates:
    """The machine's measured ceilings."""

    matmul_flops: float
    """FLOP/s of a large product in the precision the stages compute in."""
    bandwidth: float
    """Bytes/s moved by a large copy (read and write counted)."""


def stage_bounds(
    m: Mapping[str, float],
    shape: ModelShape,
    rates: Rates,
    update_passes: float = 1.0,
    prompt_share: float = 1.0,
) -> dict[str, float]:
    """Seconds each stage takes at its bound, from one step's metrics `m`: `engine/*` for prefill
    and decode (`rollout/work.py`), `perf/total_num_tokens` and the mean prompt and response
    lengths for the passes over the batch. `update_passes`: forward-backward passes per token in
    the update (`actor.ppo_epochs`, plus one forward more per epoch when layers recompute).
    `prompt_share`: rows whose common prompt the passes over the batch run once (the actor's
    shared-prompt forward: `rollout.n` samples of a prompt in one micro-batch; 1 = none)."""
    full = shape.trunk_params + shape.head_params
    out: dict[str, float] = {}
    if "engine/prefill_tokens" in m:
        # the head runs at each row's last position only: left out, with the attention
        out["prefill"] = 2 * shape.trunk_params * m["engine/prefill_tokens"] / rates.matmul_flops
        flops = 2 * full * m["engine/decode_rows"]
        moved = (
            m["engine/decode_steps"] * shape.weight_bytes
            + m["engine/decode_kv_tokens"] * shape.kv_bytes_per_token
        )
        out["decode"] = max(flops / rates.matmul_flops, moved / rates.bandwidth)
    tokens = m.get("perf/total_num_tokens", 0.0)
    prompt, response = m.get("prompt_length/mean", 0.0), m.get("response_length/mean", 0.0)
    if tokens and prompt + response:
        rows = tokens / (prompt + response)
        run = rows * (prompt / prompt_share + response)
        # the head runs over response positions only (log-probs of the sampled tokens)
        forward = 2 * (shape.trunk_params * run + shape.head_params * rows * response)
        out["old_log_prob"] = forward / rates.matmul_flops
        out["ref"] = forward / rates.matmul_flops
        out["update_actor"] = 3 * forward * update_passes / rates.matmul_flops
    return out


def stage_table(
    steps: list[Mapping[str, float]],
    shape: ModelShape,
    rates: Rates,
    update_passes: float = 1.0,
    prompt_share: float = 1.0,
) -> list[tuple[str, float, float, float | None]]:
    """(stage, mean wall s, share of the step, share of its bound or None) per stage timed in
    `steps`: prefill and decode split out of `gen`, whose rest (tools, the loop's bookkeeping)
    has no bound; stages with no time in any step are left out."""
    n = len(steps)

    def mean(key: str) -> float:
        return sum(s.get(key, 0.0) for s in steps) / n

    bounds = [stage_bounds(s, shape, rates, update_passes, prompt_share) for s in steps]
    step_s = mean("timing_s/step")
    rows: list[tuple[str, float, float, float | None]] = []
    timed = sorted({k[len("timing_s/") :] for s in steps for k in s if k.startswith("timing_s/")} - {"step"})
    for stage in timed:
        wall = mean(f"timing_s/{stage}")
        if stage == "gen" and "engine/prefill_s" in steps[0]:
            for part in ("prefill", "decode"):
                part_s = mean(f"engine/{part}_s")
                rows.append((part, part_s, part_s / step_s, _share(bounds, part, part_s)))
            wall -= mean("engine/prefill_s") + mean("engine/decode_s")
            stage = "gen (the rest: tools, episodes)"
        if wall > 0.0005 * step_s:
            rows.append((stage, wall, wall / step_s, _share(bounds, stage, wall)))
    rows.append(("step", step_s, 1.0, None))
    return rows


def _share(bounds: list[dict[str, float]], stage: str, wall: float) -> float | None:
    if wall <= 0 or any(stage not in b for b in bounds):
        return None
    return sum(b[stage] for b in bounds) / len(bounds) / wall
