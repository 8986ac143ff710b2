"""Step metrics, named as verl names them so dashboards carry over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from turnrl.batch import Batch
from turnrl.rewards.scorer import OWN_PREFIX, own_metrics
from turnrl.runtime import memory_metrics


def _stats(prefix: str, x: torch.Tensor) -> dict[str, float]:
    x = x.float()
    if x.numel() == 0:
        return {}
    return {
        f"{prefix}/mean": x.mean().item(),
        f"{prefix}/max": x.max().item(),
        f"{prefix}/min": x.min().item(),
    }


def data_metrics(batch: Batch, max_response_length: int) -> dict[str, float]:
    mask = batch["response_mask"]
    valid = mask.bool()
    seq_score = batch["token_level_scores"].sum(-1)
    seq_reward = batch["token_level_rewards"].sum(-1)
    # response length counts model tokens only: observations are not the policy's length
    resp_len = mask.sum(-1)
    prompt_len = batch["attention_mask"][:, : -mask.shape[1]].sum(-1)
    out: dict[str, float] = {}
    out.update(_stats("critic/score", seq_score))
    out.update(_stats("critic/rewards", seq_reward))
    out.update(_stats("critic/advantages", batch["advantages"][valid]))
    out.update(_stats("critic/returns", batch["returns"][valid]))
    if "values" in batch:
        out.update(_stats("critic/values", batch["values"][valid]))
    out.update(_stats("response_length", resp_len))
    out["response_length/clip_ratio"] = (resp_len >= max_response_length).float().mean().item()
    out.update(_stats("prompt_length", prompt_len))
    return out


def version_metrics(batch: Batch, trained_at: int) -> dict[str, float]:
    """Which policy versions sampled the batch, and how far behind the version that trains on it
    they are (0 in a synchronous run; the basis of off-policy correction)."""
    v = batch["rollout_policy_version"].float()
    return {
        "rollout/policy_version/min": v.min().item(),
        "rollout/policy_version/max": v.max().item(),
        "rollout/policy_lag/max": float(trained_at) - v.min().item(),
    }


@dataclass
class QueueTimes:
    """Where a produced batch's time went, for async mode's queue health."""

    trainer_idle_s: float
    """The trainer waited this long for the batch."""
    rollout_idle_s: float
    """The producer waited this long for the staleness bound before starting it."""
    gen_s: float
    """Its generation stage (engine and tools)."""
    age_s: float
    """From scored to trained: its wait in the queue."""


def async_metrics(
    batch: Batch,
    trained_at: int,
    times: QueueTimes,
    queue_depth: int,
    updates_per_step: int = 1,
) -> dict[str, float]:
    """Async mode's accounting: how old the trained samples are (versions behind the trainer; per
    sample by its oldest token, and per model token; in optimizer updates, the unit of
    `trainer.max_staleness`: versions x `updates_per_step`; in seconds from scored to trained), who
    waited for whom, how fast the generator made samples, and how many rollouts were ready behind
    this one. The trainer's idle share is completed by `idle_share` once the step's time is known."""
    lag = (trained_at - batch["rollout_policy_version"]).float()
    mask = batch["response_mask"] > 0
    token_lag = (trained_at - batch["rollout_token_versions"]).float()[mask]
    return {
        "async/staleness/mean": lag.mean().item(),
        "async/staleness/max": lag.max().item(),
        "async/staleness_updates/max": lag.max().item() * updates_per_step,
        "async/token_staleness/mean": token_lag.mean().item() if token_lag.numel() else 0.0,
        "async/sample_age_s": times.age_s,
        "async/trainer_idle_s": times.trainer_idle_s,
        "async/rollout_idle_s": times.rollout_idle_s,
        "async/gen_samples_per_s": len(batch) / times.gen_s if times.gen_s > 0 else 0.0,
        "async/queue_depth": float(queue_depth),
    }


def idle_share(trainer_idle_s: float, step_s: float) -> dict[str, float]:
    """`async/trainer_idle_share`: the step's share the trainer spent waiting for a batch."""
    return {"async/trainer_idle_share": trainer_idle_s / step_s if step_s > 0 else 0.0}


def extra_metrics(extras: dict[str, list[float]], prefix: str = "reward_extra") -> dict[str, float]:
    """`<prefix>/<key>/mean` per reward extra; the reward stage's own metrics (`reward/errors`, the
    count of failed rows, one entry per reward call; the judge's `reward/judge/*`) keep their names,
    counts summed (`turnrl.rewards.scorer.own_metrics`)."""
    out = {
        f"{prefix}/{k}/mean": float(np.mean(v))
        for k, v in extras.items()
        if v and not k.startswith(OWN_PREFIX)
    }
    out.update(own_metrics(extras))
    return out


def timing_metrics(timing: dict[str, float], batch: Batch, step_time: float) -> dict[str, Any]:
    out: dict[str, Any] = {f"timing_s/{k}": v for k, v in timing.items()}
    out["timing_s/step"] = step_time
    tokens = batch["attention_mask"].sum().item()
    out["perf/total_num_tokens"] = tokens
    out["perf/throughput"] = tokens / step_time if step_time > 0 else 0.0
    out.update(memory_metrics())
    return out
