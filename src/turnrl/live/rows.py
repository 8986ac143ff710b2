"""Groups of rewarded sessions as the trainer's batch: the fields stages 1-6 would have made.

Each session gives one row per recorded sample (a session whose client rewrote its history forked:
`agent.gateway.trajectory`), every row with the session's reward on its last model token, every row
of a group the same `uid`, so the run's estimator (`grpo`, `rloo`, ...) takes the group's other
sessions as the baseline."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from turnrl.agent.assemble import assemble_episodes
from turnrl.agent.episode import Episode
from turnrl.batch import Batch
from turnrl.live.store import Session
from turnrl.rewards.scorer import on_last_token
from turnrl.tensors import left_pad

EPISODE_KEYS = ("prompt", "ids", "mask", "log_probs", "versions", "turns", "truncated")


def sample_record(e: Episode) -> dict[str, Any]:
    """One recorded sample as the session record keeps it (JSON)."""
    return {k: getattr(e, k) for k in EPISODE_KEYS}


def episode_of(record: dict[str, Any]) -> Episode:
    e = Episode(list(record["prompt"]))
    for k in EPISODE_KEYS[1:]:
        setattr(e, k, record[k])
    e.done = True
    return e


def prompt_key(prompt: list[int]) -> str:
    """Sessions that began from the same prompt, token for token, share this."""
    return hashlib.sha256(np.asarray(prompt, dtype=np.int64).tobytes()).hexdigest()[:32]


def oldest_version(s: Session) -> int:
    """The policy version of the session's oldest model token."""
    return min(
        (v for r in s.record["samples"] for v, m in zip(r["versions"], r["mask"], strict=True) if m),
        default=0,
    )


def split_stale(
    groups: list[list[Session]], version: int, max_lag: int
) -> tuple[list[list[Session]], list[list[Session]]]:
    """(fresh, stale): a group is stale when one of its sessions has a model token sampled more than
    `max_lag` versions before `version` (a group's advantages need all of it, so it goes whole)."""
    fresh: list[list[Session]] = []
    stale: list[list[Session]] = []
    for group in groups:
        (stale if any(version - oldest_version(s) > max_lag for s in group) else fresh).append(group)
    return fresh, stale


def group_batch(groups: list[list[Session]], step: int, pad_id: int, response_length: int) -> Batch:
    samples: list[Episode] = []
    uids: list[str] = []
    rewards: list[float] = []
    tasks: list[str] = []
    last: list[bool] = []
    for g, group in enumerate(groups):
        for s in group:
            forks = [episode_of(r) for r in s.record["samples"]]
            samples += forks
            uids += [f"live-{step}-{g}"] * len(forks)
            rewards += [float(s.outcome() or 0.0)] * len(forks)
            tasks += [s.task] * len(forks)
            last += [False] * (len(forks) - 1) + [True]
    prompt_ids, prompt_mask = left_pad([e.prompt for e in samples], pad_id)
    prompts = Batch({"input_ids": prompt_ids, "attention_mask": prompt_mask})
    batch = assemble_episodes(prompts, samples, 1, pad_id, response_length)
    batch["uid"] = np.array(uids, dtype=object)
    batch["data_source"] = np.array([f"live/{t}" for t in tasks], dtype=object)
    batch["episode_last"] = np.array(last, dtype=bool)
    batch["token_level_scores"] = on_last_token(torch.tensor(rewards), batch["response_mask"])
    return batch
