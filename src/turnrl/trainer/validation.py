"""Validation: sample the val set (greedy, n=1 by default), score, average per data source."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from turnrl.batch import Batch
from turnrl.data.dataset import Example
from turnrl.data.loader import batches_of
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import Rollout, SamplingParams
from turnrl.trainer import stages


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
    for prompts in batches_of(examples, batch_size, pad_id):
        gen_batch = stages.split_generation_input(prompts)
        out, _ = rollout.generate(gen_batch, params)
        batch: Batch = stages.group_and_merge(prompts, out, params.n)
        extra = stages.score(reward, batch)
        seq_scores = batch["token_level_scores"].sum(-1).tolist()
        texts = reward.decode(batch)
        for i, s in enumerate(seq_scores):
            per_source[batch["data_source"][i]].append(s)
            samples.append(
                {
                    "index": batch["index"][i],
                    "response": texts[i],
                    "score": s,
                    "ground_truth": batch["ground_truth"][i],
                }
            )
        for k, v in extra.items():
            extras[k] += v
    metrics = {f"val/test_score/{src}": float(np.mean(v)) for src, v in per_source.items()}
    metrics["val/test_score/mean"] = float(np.mean([s for v in per_source.values() for s in v]))
    metrics.update({f"val/{k}/mean": float(np.mean(v)) for k, v in extras.items()})
    return metrics, samples
