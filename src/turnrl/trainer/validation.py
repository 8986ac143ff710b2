"""Validation: sample the val set (greedy, n=1 by default), score, average per data source.

`scored_batches` is the generate-and-score pass itself; `turnrl eval` runs the same pass, so its
greedy scores are training's `val/test_score/*` for the same weights and prompts.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from turnrl.batch import Batch
from turnrl.data.dataset import Example
from turnrl.data.loader import batches_of
from turnrl.rewards.guard import ERRORS_KEY
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import Rollout, SamplingParams
from turnrl.trainer import stages


@dataclass
class Scored:
    """One batch of prompts after generation and the rule reward."""

    batch: Batch
    """The prompts repeated `params.n` times (rows A,A,B,B) merged with their rollout and `token_level_scores`."""
    texts: list[str]
    """Each row's decoded response."""
    scores: list[float]
    """Each row's sequence score."""
    extras: dict[str, list[float]]
    """The reward functions' extra values (and the failure count under `ERRORS_KEY`)."""
    rollout_metrics: dict[str, float]
    """What the rollout reported for this batch (`agent/*` in agent mode)."""


def scored_batches(
    rollout: Rollout,
    reward: RuleReward,
    examples: list[Example],
    params: SamplingParams,
    batch_size: int,
    pad_id: int,
) -> Iterator[Scored]:
    """Every example once, in order, `batch_size` prompts at a time: `params.n` responses each,
    scored by the rule reward alone (no reward model, no shaping), as a validation score is."""
    for prompts in batches_of(examples, batch_size, pad_id):
        gen_batch = stages.split_generation_input(prompts)
        out, rollout_metrics = rollout.generate(gen_batch, params)
        batch: Batch = stages.group_and_merge(prompts, out, params.n)
        extra = stages.score(functools.partial(reward, validation=True), batch)
        seq_scores = batch["token_level_scores"].sum(-1).tolist()
        yield Scored(batch, reward.decode(batch), seq_scores, extra, rollout_metrics)


def validate(
    rollout: Rollout,
    reward: RuleReward,
    examples: list[Example],
    params: SamplingParams,
    batch_size: int,
    pad_id: int,
) -> tuple[dict[str, float], list[dict[str, object]]]:
    """Metrics `val/test_score/<data_source>` (+ `/mean`) and one sample row per response."""
    per_source: dict[str, list[float]] = defaultdict(list)
    extras: dict[str, list[float]] = defaultdict(list)
    samples: list[dict[str, object]] = []
    for scored in scored_batches(rollout, reward, examples, params, batch_size, pad_id):
        batch = scored.batch
        for i, s in enumerate(scored.scores):
            per_source[batch["data_source"][i]].append(s)
            samples.append(
                {
                    "index": batch["index"][i],
                    "response": scored.texts[i],
                    "score": s,
                    "ground_truth": batch["ground_truth"][i],
                }
            )
        for k, v in scored.extras.items():
            extras[k] += v
    metrics = {f"val/test_score/{src}": float(np.mean(v)) for src, v in per_source.items()}
    metrics["val/test_score/mean"] = float(np.mean([s for v in per_source.values() for s in v]))
    errors = extras.pop(ERRORS_KEY, [])
    metrics.update({f"val/{k}/mean": float(np.mean(v)) for k, v in extras.items()})
    metrics[f"val/{ERRORS_KEY}"] = float(sum(errors))
    return metrics, samples
