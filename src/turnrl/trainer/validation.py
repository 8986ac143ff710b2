"""Validation: sample the val set (greedy, n=1 by default), score, average per data source.

`scored_batches` is the validation pass: stages 2-6 (`stages.generate_and_score`, training's own)
over every val prompt once, scored by the rule reward alone. `turnrl eval` runs the same pass, so its
greedy scores are training's `val/test_score/*` for the same weights and prompts.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from turnrl.data.dataset import Example
from turnrl.data.loader import batches_of
from turnrl.rewards.guard import ERRORS_KEY
from turnrl.rewards.scorer import OWN_PREFIX, RATE_KEYS, RuleReward, own_metrics, rates_by_source
from turnrl.rollout.base import Rollout, SamplingParams
from turnrl.trainer import stages
from turnrl.trainer.stages import Scored


def rule_scorer(reward: RuleReward, validation: bool = False) -> stages.Scorer:
    """Stage 6 with the rule reward alone (rule scorers and the judge; no reward model, no
    shaping): a validation score."""
    return functools.partial(stages.score, functools.partial(reward, validation=validation))


def scored_batches(
    rollout: Rollout,
    reward: RuleReward,
    examples: list[Example],
    params: SamplingParams,
    batch_size: int,
    pad_id: int,
) -> Iterator[Scored]:
    """Every example once, in order, `batch_size` prompts at a time: `params.n` responses each (an
    agent episode that forked: its last row), scored as a validation score is, with their texts."""
    scorer = rule_scorer(reward, validation=True)
    for prompts in batches_of(examples, batch_size, pad_id):
        scored = stages.episodes_only(
            stages.generate_and_score(rollout, scorer, prompts, params, stages.StageClock())
        )
        scored.texts = reward.decode(scored.batch)
        yield scored


def validate(
    rollout: Rollout,
    reward: RuleReward,
    examples: list[Example],
    params: SamplingParams,
    batch_size: int,
    pad_id: int,
) -> tuple[dict[str, float], list[dict[str, object]]]:
    """Metrics `val/test_score/<data_source>` (+ `/mean`), `val/accuracy` and `val/format_rate` (+
    `/<data_source>`) where the scorers report them (`rewards.scorer.RATE_KEYS`), and one sample row
    per response."""
    per_source: dict[str, list[float]] = defaultdict(list)
    extras: dict[str, list[float]] = defaultdict(list)
    rates: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    samples: list[dict[str, object]] = []
    for scored in scored_batches(rollout, reward, examples, params, batch_size, pad_id):
        batch = scored.batch
        # the scorer's per-row rates (acc, formatted) when every row reported them: `turnrl compare --field`
        aligned = {k: v for k in RATE_KEYS if len(v := scored.extras.get(k, [])) == len(scored.scores)}
        for i, s in enumerate(scored.scores):
            per_source[batch["data_source"][i]].append(s)
            samples.append(
                {
                    "data_source": batch["data_source"][i],
                    "index": batch["index"][i],
                    "response": scored.texts[i],
                    "score": s,
                    "ground_truth": batch["ground_truth"][i],
                    **{k: float(v[i]) for k, v in aligned.items()},
                }
            )
        for k, v in scored.extras.items():
            extras[k] += v
        for name, by_source in rates_by_source(list(batch["data_source"]), scored.extras).items():
            for src, v in by_source.items():
                rates[name][src] += v
    metrics = {f"val/test_score/{src}": float(np.mean(v)) for src, v in per_source.items()}
    metrics["val/test_score/mean"] = float(np.mean([s for v in per_source.values() for s in v]))
    own = own_metrics(extras)  # reward/errors and the judge's counts: val/reward/...
    metrics.update(
        {f"val/{k}/mean": float(np.mean(v)) for k, v in extras.items() if not k.startswith(OWN_PREFIX)}
    )
    metrics.update({f"val/{k}": v for k, v in own.items()})
    metrics[f"val/{ERRORS_KEY}"] = own.get(ERRORS_KEY, 0.0)
    for name, by_source in rates.items():
        metrics[f"val/{name}"] = float(np.mean([v for vs in by_source.values() for v in vs]))
        metrics.update({f"val/{name}/{src}": float(np.mean(v)) for src, v in by_source.items() if src})
    return metrics, samples
