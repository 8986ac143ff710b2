"""The stages of one training step (docs/architecture.md, the dataflow table), as functions of a Batch.

Each takes what it needs and returns new fields; the loop in `ppo.py` only sequences
and times them. `STAGES` names every stage the loop runs, in the order it runs them: the
names double as `timing_s/<name>` metric keys and key the step inspector's texts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from turnrl.algorithms.advantages import (
    AdvantageInputs,
    Estimator,
    compute_advantage,
    episode_advantage,
    resolve_estimator,
)
from turnrl.algorithms.distill import distill_metrics
from turnrl.algorithms.rollout_corr import bypass_choice, rollout_correction
from turnrl.batch import Batch
from turnrl.config.schema import Config, RolloutCorrectionConfig
from turnrl.rollout.base import Rollout, SamplingParams
from turnrl.rollout.rollout_copy import samples_in_model_precision
from turnrl.trainer.setup import default_precision, pick_device

PROMPT_FIELDS = ("input_ids", "attention_mask", "position_ids")
ROW_FIELDS = ("raw_prompt", "data_source", "ground_truth", "extra_info", "index")
"""The dataset row's own fields, lent to a rollout that hands each row to an agent function."""

STAGES: tuple[str, ...] = (
    "load_batch",  # 1  prompts from the dataloader
    "gen_batch",  # 2  split off the generation input
    "gen",  # 3  rollout (single-turn or agent)
    "group",  # 4  uid groups, merge with the rollout
    "reward",  # 6  token_level_scores
    "gen_max",  # 6b ReMax: a greedy response per prompt, its score is the baseline
    "old_log_prob",  # 7  the trainer's log-probs of the sampled tokens
    "ref",  # 8  reference log-probs
    "teacher",  # 8b on-policy distillation: the teacher's log-probs of the student's tokens
    "values",  # 9  critic values
    "kl_in_reward",  # 10 r = score - beta * KL
    "adv",  # 11 advantages and returns
    "update_critic",  # 12
    "update_actor",  # 12
    "sync_weights",  # 12b the rollout engine takes the new policy version
)


class StageHook(Protocol):
    """Told of every stage as it ends. Timing is one hook; the step inspector's recorder another."""

    wants_batches: bool
    """Whether the hook reads the stages' batches. The loop then also asks the actor for its update's
    per-token diagnostics (the `update_actor` batch), which cost a copy a plain run does not pay."""

    def record(self, stage: str, batch: Batch | None, elapsed_s: float) -> None:
        """`batch`: what the stage made (None for a stage that makes no batch)."""
        ...


class Timing:
    """The hook every clock has: seconds per stage, summed over repeats (`timing_s/<stage>`)."""

    wants_batches = False

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def record(self, stage: str, batch: Batch | None, elapsed_s: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + elapsed_s


@dataclass
class Stage:
    """What a running stage hands to the hooks when it ends: `batch` (set it to a new batch when the
    stage makes one)."""

    batch: Batch | None = None


class StageClock:
    """Runs the hooks at the end of every named stage; `timing` is its own `Timing` hook. The loop
    stays the same whoever listens: a run, a test that keeps batches, the step inspector."""

    def __init__(self, hooks: Sequence[StageHook] = ()):
        self.timing = Timing()
        self.hooks: list[StageHook] = [self.timing, *hooks]

    @property
    def wants_batches(self) -> bool:
        return any(h.wants_batches for h in self.hooks)

    @contextmanager
    def __call__(self, name: str, batch: Batch | None = None) -> Iterator[Stage]:
        if name not in STAGES:
            raise ValueError(f"unknown stage '{name}'; stages: {', '.join(STAGES)}")
        stage = Stage(batch)
        start = time.perf_counter()
        # a label for torch.profiler (benchmarks/step_breakdown.py --profile): ops grouped by stage
        with torch.profiler.record_function(f"stage:{name}"):
            yield stage
        elapsed = time.perf_counter() - start
        for hook in self.hooks:
            hook.record(name, stage.batch, elapsed)


def split_generation_input(batch: Batch, rows: bool = False) -> Batch:
    """Stage 2: pop the prompt tensors; the engine needs nothing else. `rows`: the row's own fields
    go along too, not popped (an agent function reads its row: `rollout.agent`)."""
    gen_batch = batch.pop(PROMPT_FIELDS)
    if rows:
        for name in ROW_FIELDS:
            if name in batch:
                gen_batch[name] = batch[name]
    return gen_batch


def group_and_merge(batch: Batch, rollout: Batch, n: int) -> Batch:
    """Stage 4: repeat the prompt rows n times like the rollout did, tag groups by `uid`.

    `uid` is the prompt's own `index`, identical for its n samples: a fresh id per row would
    make every GRPO group a group of one. An agent episode that forked at template drift gave
    several rows (`episode_row` names their prompt row): each gets its prompt's fields.
    """
    merged = batch.repeat(n, interleave=True)
    merged["uid"] = merged["index"].copy()
    if "episode_row" in rollout:
        merged = merged.index(np.asarray(rollout["episode_row"], dtype=np.int64))
    return merged.union(rollout)


def score(
    reward_fn: Callable[[Batch], tuple[torch.Tensor, dict[str, list[float]]]], batch: Batch
) -> dict[str, list[float]]:
    """Stage 6: `token_level_scores`, the score at each response's last model token."""
    scores, extras = reward_fn(batch)
    batch["token_level_scores"] = scores
    return extras


Scorer = Callable[[Batch], dict[str, list[float]]]
"""Stage 6 as one call: writes `token_level_scores` into the batch, returns the reward's extra values."""


@dataclass
class Scored:
    """Prompts after stages 2-6: sampled, grouped and scored."""

    batch: Batch
    """The prompts repeated `params.n` times (rows A,A,B,B) merged with their rollout and
    `token_level_scores`."""
    extras: dict[str, list[float]]
    """The reward's extra values per row (and its failure count under `ERRORS_KEY`)."""
    rollout_metrics: dict[str, float]
    """What the rollout reported (`agent/*` in agent mode)."""
    scores: list[float]
    """Each row's sequence score, as scored."""
    texts: list[str] = field(default_factory=list)
    """Each row's decoded response, where a reader needs them (validation, `turnrl eval`)."""


def generate_and_score(
    rollout: Rollout, scorer: Scorer, prompts: Batch, params: SamplingParams, clock: StageClock
) -> Scored:
    """Stages 2-6: sample `params.n` responses per prompt, group them, score them. Training, the ReMax
    baseline, validation and `turnrl eval` all sample through here, so a validation score and an eval
    score are the training reward of the same responses. `prompts` is left whole (ReMax samples the
    same prompts again)."""
    prompts = prompts.select(prompts.keys())
    with clock("gen_batch") as st:
        gen_batch = st.batch = split_generation_input(prompts, rollout.wants_rows)
    with clock("gen") as st:
        out, rollout_metrics = rollout.generate(gen_batch, params)
        st.batch = out
    counters = getattr(rollout.engine, "counters", None)  # engines that count (a server engine)
    if counters is not None:  # a server engine's restarts and re-sent requests, so far in the run
        rollout_metrics = {**rollout_metrics, **{f"rollout/server/{k}": v for k, v in counters().items()}}
    with clock("group") as st:
        batch = st.batch = group_and_merge(prompts, out, params.n)
    with clock("reward", batch):
        extras = scorer(batch)
    return Scored(batch, extras, rollout_metrics, batch["token_level_scores"].sum(-1).tolist())


def episodes_only(scored: Scored) -> Scored:
    """One row per episode: an agent episode that forked at template drift keeps its last row (each
    of its rows holds the episode's reward), so a validation average counts episodes, not forks."""
    batch = scored.batch
    if "episode_last" not in batch or bool(np.all(batch["episode_last"])):
        return scored
    keep = np.flatnonzero(np.asarray(batch["episode_last"], dtype=bool))
    return Scored(
        batch.index(keep),
        # per-row values; a count (the reward's failures) stays as it is
        {k: [v[i] for i in keep] if len(v) == len(batch) else v for k, v in scored.extras.items()},
        scored.rollout_metrics,
        [scored.scores[i] for i in keep],
        [scored.texts[i] for i in keep] if scored.texts else [],
    )


def old_log_probs_from_rollout(cfg: Config) -> bool:
    """Whether stage 7 takes the rollout's log-probs instead of a trainer forward pass
    (`algorithm.rollout_correction.bypass`). `auto` does when they are the step-start policy's own:
    a synchronous step with nothing to correct, that is on-policy (one epoch, one mini-batch: the
    ratio only has to be ~1) or whose engine samples from the trainer's very module (one rank, `hf`
    engine in the trainer's precision: the same weights, so the same numbers up to kernel rounding).
    With a lower-precision rollout (`rollout.dtype`) only the on-policy case bypasses: the PPO ratio is
    then taken against the rollout's own policy, the importance weight that corrects the gap."""
    rc, a, t = cfg.algorithm.rollout_correction, cfg.actor, cfg.trainer
    choice = bypass_choice(rc.bypass)
    if choice != "auto":
        return choice == "true"
    synchronous = t.mode == "sync" or t.max_staleness == 0
    on_policy = a.ppo_epochs == 1 and a.ppo_mini_batch_size == cfg.data.train_batch_size
    device, world = pick_device(t.device), t.nnodes * t.n_gpus_per_node
    # as the roles resolve `auto` (on one GPU: float32 master weights, a bfloat16 sampling copy)
    model, rollout = default_precision(cfg.model, cfg.rollout, world, device)
    same_precision = samples_in_model_precision(rollout.dtype, model.dtype, device)
    same_module = cfg.rollout.engine == "hf" and world == 1 and same_precision
    return synchronous and rc.mode == "none" and (on_policy or same_module)


def correct_off_policy(batch: Batch, rc: RolloutCorrectionConfig) -> dict[str, float]:
    """Stage 7b: the engine's log-probs against the trainer's. With TIS/MIS, adds the policy loss's
    per-token `rollout_is_weights` and `rollout_keep_mask` (MIS drops tokens or whole responses);
    with mode `none`, only measures the gap."""
    corr = rollout_correction(
        batch["old_log_probs"],
        batch["rollout_log_probs"],
        batch["response_mask"],
        rc.mode,
        rc.level,
        rc.tis_cap,
        rc.mis_low,
        rc.mis_high,
    )
    if rc.mode != "none":
        batch["rollout_is_weights"], batch["rollout_keep_mask"] = corr.weights, corr.keep
    return corr.metrics


def advantages(batch: Batch, cfg: Config, estimator: Estimator | None = None) -> dict[str, float]:
    """Stage 11: estimator-specific advantages and returns, by `estimator` (the run's, resolved once
    at setup: `StepSampler.estimator`; None: resolved from `cfg` now). With a teacher (on-policy
    distillation: `adv_estimator=opd` or `distill_coef`), also the student's reverse KL to it:
    `distill/*` metrics."""
    if "token_level_rewards" not in batch:
        batch["token_level_rewards"] = batch["token_level_scores"]
    x = AdvantageInputs(
        batch["token_level_rewards"],
        batch["response_mask"],
        index=batch["uid"],
        values=batch.tensors.get("values"),
        reward_baselines=batch.tensors.get("reward_baselines"),
        old_log_probs=batch.tensors.get("old_log_probs"),
        teacher_log_prob=batch.tensors.get("teacher_log_prob"),
        responses=batch.tensors.get("responses"),
        turn_rewards=batch.non_tensors.get("turn_rewards"),
    )
    if estimator is None:
        estimator = resolve_estimator(cfg.algorithm.adv_estimator, cfg.algorithm)
    if "episode_last" in batch:  # an agent's forked episodes: one response each in their group
        adv, ret = episode_advantage(estimator, x, batch["episode_last"], cfg.algorithm.distill_coef)
    else:
        adv, ret = compute_advantage(estimator, x, cfg.algorithm.distill_coef)
    batch["advantages"] = adv
    batch["returns"] = ret
    if "teacher_log_prob" not in batch:
        return {}
    return distill_metrics(batch["old_log_probs"], batch["teacher_log_prob"], batch["response_mask"])


def add_to_last_token(batch: Batch, per_seq: torch.Tensor) -> None:
    """Add a per-sequence amount to `token_level_scores` at the last model token."""
    from turnrl.rewards.scorer import last_token_index

    mask = batch["response_mask"]
    rows = torch.arange(len(batch))
    scores = batch["token_level_scores"].clone()
    scores[rows, last_token_index(mask)] += per_seq.to(scores.dtype) * (mask.sum(1) > 0).to(scores.dtype)
    batch["token_level_scores"] = scores


def overlong_shaping(batch: Batch, max_length: int, buffer: int, factor: float) -> dict[str, float]:
    from turnrl.rewards.shaping import overlong_penalty

    penalty = overlong_penalty(batch["response_mask"].sum(-1), max_length, buffer, factor)
    add_to_last_token(batch, penalty)
    return {"reward/overlong_penalty/mean": penalty.mean().item()}


def kl_in_reward(batch: Batch, controller: Any, kind: str) -> dict[str, float]:
    """Stage 10: r_t = score_t - beta * KL_t over model tokens; then let the controller adapt beta."""
    from turnrl.algorithms.kl import apply_kl_in_reward

    rewards, metrics = apply_kl_in_reward(
        batch["token_level_scores"],
        batch["old_log_probs"],
        batch["ref_log_prob"],
        batch["response_mask"],
        controller.value,
        kind,
    )
    batch["token_level_rewards"] = rewards
    controller.update(metrics["critic/kl"], n_steps=len(batch))
    return metrics


def keep_varied_groups(batch: Batch) -> tuple[Batch, int]:
    """DAPO dynamic sampling: drop groups whose sequence scores are all equal (no learning signal)."""
    scores = batch["token_level_scores"].sum(-1)
    spread: dict[object, list[float]] = {}
    for uid, s in zip(batch["uid"], scores.tolist(), strict=True):
        spread.setdefault(uid, []).append(s)
    keep_uids = {u for u, v in spread.items() if max(v) - min(v) > 1e-8}
    rows = [i for i, u in enumerate(batch["uid"]) if u in keep_uids]
    return batch.index(rows), len(spread) - len(keep_uids)


def prompts_of_flat_groups(prompts: Batch, varied: Batch) -> Batch:
    """The rows of `prompts` whose group is not in `varied` (the groups `keep_varied_groups` kept):
    the prompts to sample again when dynamic sampling refills with the same prompts."""
    kept = set(varied["uid"])
    return prompts.index([i for i, idx in enumerate(prompts["index"]) if idx not in kept])


def concat_rounds(rounds: list[Batch], pad_id: int) -> Batch:
    """DAPO's rounds as one batch. Each round's prompts were left-padded to its own longest prompt,
    so the prompt-side fields (`(B, T_prompt)` and `(B, T)` in `fields.py`) are left-padded to the
    widest round first: ids with `pad_id`, masks and positions with 0 (a pad's position is 0, as
    `position_ids_from_mask` gives). Response-side fields all have `data.max_response_length`."""
    from turnrl.fields import FIELDS

    width = max(r["prompts"].shape[1] for r in rounds)
    padded = []
    for r in rounds:
        extra = width - r["prompts"].shape[1]
        if extra:
            r = r.select(r.keys())
            for name, value in list(r.tensors.items()):
                field = FIELDS.get(name)
                if field is not None and field.shape in ("(B, T_prompt)", "(B, T)"):
                    fill = pad_id if name in ("prompts", "input_ids") else 0
                    r[name] = torch.nn.functional.pad(value, (extra, 0), value=fill)
        padded.append(r)
    return Batch.concat(padded)


def drop_stale(batch: Batch, version: int, max_staleness: int) -> tuple[Batch, int]:
    """Async mode: drop every group (uid) holding a sample older than `max_staleness` versions:
    a group's advantages need all of its samples. Returns the batch and the samples dropped."""
    lag = version - batch["rollout_policy_version"]
    stale = {u for u, late in zip(batch["uid"], (lag > max_staleness).tolist(), strict=True) if late}
    if not stale:
        return batch, 0
    rows = [i for i, u in enumerate(batch["uid"]) if u not in stale]
    if not rows:
        raise RuntimeError(
            f"every sample of the batch is more than trainer.max_staleness={max_staleness} versions old "
            f"(trainer at version {version})"
        )
    return batch.index(rows), len(batch) - len(rows)
