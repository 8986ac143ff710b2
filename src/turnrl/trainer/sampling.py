"""Stages 2-6 of a training step: `StepSampler`, what the producer runs after drawing the prompts.

The generate-and-score pass itself is `stages.generate_and_score`, shared with validation and
`turnrl eval`; training adds its own parts on top: the seeds of the step, the reward model and the
overlong shaping in the score, ReMax's greedy baseline and DAPO's dynamic sampling rounds.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from turnrl.algorithms.advantages import resolve_estimator
from turnrl.batch import Batch, episode_ends, first_episodes
from turnrl.config import Config
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import Rollout, SamplingParams
from turnrl.trainer import stages
from turnrl.trainer.metrics import extra_metrics
from turnrl.trainer.stages import Scored, StageClock


class StepSampler:
    """Samples and scores a training step's prompts. `batches`: the loader's stream, from which
    dynamic sampling draws more prompts; `seeded`: whether each step's sampling is seeded; `on_scored`:
    told of every scored round before the next is drawn (the curriculum's `GroupWatch.observe`);
    `pad_id`: the tokenizer's pad id. `estimator`: the run's advantage estimator, resolved once here
    (a user's function is imported once); its row says whether a round samples a greedy baseline."""

    def __init__(
        self,
        cfg: Config,
        rollout: Rollout,
        reward: RuleReward,
        reward_model: Any,
        batches: Iterator[Batch],
        seeded: bool,
        on_scored: Callable[[Batch], None] | None = None,
        pad_id: int = 0,
    ):
        self.cfg, self.rollout, self.reward, self.reward_model = cfg, rollout, reward, reward_model
        self.batches, self.seeded, self.on_scored = batches, seeded, on_scored
        self.pad_id = pad_id  # DAPO's rounds are padded to one prompt width with it
        self.estimator = resolve_estimator(cfg.algorithm.adv_estimator, cfg.algorithm)

    def rollout_and_score(self, prompts: Batch, clock: StageClock, step: int) -> tuple[Batch, dict[str, Any]]:
        """Stages 2-6 for training step `step` (it seeds the sampling). With DAPO dynamic sampling,
        rounds on fresh prompts until the batch is full of groups whose scores differ (a group of
        equal scores has no learning signal)."""
        cfg, n, fg = self.cfg, self.cfg.rollout.n, self.cfg.algorithm.filter_groups
        kept: list[Batch] = []
        extras: dict[str, list[float]] = {}
        dropped = retried = 0
        for round_ in itertools.count(1):
            scored = self.sample_round(prompts, clock, step, round_)
            if self.on_scored:
                self.on_scored(scored.batch)
            for k, v in scored.extras.items():
                extras.setdefault(k, []).extend(v)
            if not fg.enable:
                return scored.batch, {**extra_metrics(extras), **scored.rollout_metrics}
            varied, n_dropped = stages.keep_varied_groups(scored.batch)
            dropped += n_dropped
            kept.append(varied)
            full = sum(len(episode_ends(b)) for b in kept) // n >= cfg.data.train_batch_size
            if full or round_ >= fg.max_num_gen_batches:
                break
            if fg.refill == "same":  # the flat groups' own prompts again, with the next round's seed
                prompts = stages.prompts_of_flat_groups(prompts, varied)
                retried += len(prompts)
                continue
            with clock("load_batch") as st:
                prompts = st.batch = next(self.batches)
        merged = first_episodes(stages.concat_rounds(kept, self.pad_id), cfg.data.train_batch_size * n)
        if len(merged) == 0:
            # every group of every round was flat (a rare success not found within the budget): the
            # step trains on the last round as sampled, whose group advantages are all 0, rather than
            # ending the run; batch/kept_prompts 0 says so (a round of data.gen_batch_size prompts is cut
            # to the step's)
            merged = first_episodes(scored.batch, cfg.data.train_batch_size * n)
        metrics = {**extra_metrics(extras), **scored.rollout_metrics}
        metrics["batch/num_gen_batches"], metrics["batch/dropped_groups"] = round_, dropped
        metrics["batch/kept_prompts"] = len(episode_ends(merged)) // n if any(len(b) for b in kept) else 0
        if fg.refill == "same":
            metrics["batch/retried_groups"] = retried
        return merged, metrics

    def sample_round(self, prompts: Batch, clock: StageClock, step: int, round_: int) -> Scored:
        """One round of stages 2-6, scored as training scores; for an estimator that needs it (ReMax),
        with the greedy baseline of the same prompts."""
        params = self.params(step, round_)
        scored = stages.generate_and_score(self.rollout, self.score, prompts, params, clock)
        if self.estimator.spec.needs_greedy_baseline:
            with clock("gen_max"):
                baseline = self.greedy_baseline(prompts, step)
                batch = scored.batch  # a forked agent episode's rows share their prompt's baseline
                rows = (
                    np.asarray(batch["episode_row"], dtype=np.int64) // params.n
                    if "episode_row" in batch
                    else None
                )
                scored.batch["reward_baselines"] = (
                    baseline.repeat_interleave(params.n) if rows is None else baseline[torch.as_tensor(rows)]
                )
        return scored

    def greedy_baseline(self, prompts: Batch, step: int) -> torch.Tensor:
        """ReMax's baseline: the training score of a greedy response to each prompt."""
        params = dataclasses.replace(self.params(step, 0), n=1, temperature=0.0)
        greedy = stages.generate_and_score(self.rollout, self.score, prompts, params, StageClock())
        return greedy.batch["token_level_scores"].sum(-1)

    def score(self, batch: Batch) -> dict[str, list[float]]:
        """Stage 6 as training scores: the rule score (with the judge's, `reward.judge`), plus the
        reward model's, plus the overlong shaping, at the last model token (validation scores the
        rule reward alone)."""
        cfg = self.cfg
        extras = stages.score(self.reward, batch)
        if self.reward_model:
            rm = self.reward_model.score(batch)["rm_scores"]
            stages.add_to_last_token(batch, cfg.reward_model.coef * rm)
            extras["reward_model_score"] = rm.tolist()
        ob = cfg.reward.overlong_buffer
        if ob.enable:
            stages.overlong_shaping(batch, cfg.data.max_response_length, ob.len, ob.penalty_factor)
        return extras

    def params(self, step: int, round_: int = 1) -> SamplingParams:
        """Training's sampling parameters: the seed is a function of the run's seed, the step and the
        round, so a resumed run samples what the uninterrupted one did."""
        r, seed = self.cfg.rollout, self.cfg.trainer.seed
        return SamplingParams(
            max_new_tokens=self.cfg.data.max_response_length,
            n=r.n,
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            stop=list(r.stop),
            ignore_eos=r.ignore_eos,
            seed=(seed * 1_000_003 + step) * 31 + round_ if self.seeded else None,
        )


__all__ = ["StepSampler"]
