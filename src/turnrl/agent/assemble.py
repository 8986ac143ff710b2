"""Episodes -> the rollout Batch (the fields of `turnrl.rollout.base.assemble`) and agent metrics.

The batch is built by the single-turn `assemble`, so both modes hand the trainer identical fields
and layouts; agent mode then zeroes `response_mask` on observation tokens. `attention_mask` stays 1
on them: the model did read them.
"""

from __future__ import annotations

import numpy as np
import torch

from turnrl.agent.episode import Episode
from turnrl.agent.executor import ERROR_KINDS
from turnrl.agent.loop import CallStats
from turnrl.batch import Batch
from turnrl.rollout.base import Generation, assemble, oldest_version

# per-episode stats carried as non-tensor fields (one value per response row)
EPISODE_FIELDS = (
    "agent_turns",
    "agent_tool_calls",
    "agent_invalid_actions",
    "agent_tool_errors",
    "agent_truncated",
)


def assemble_episodes(
    gen_batch: Batch,
    episodes: list[Episode],
    n: int,
    pad_id: int,
    response_length: int,
    step_reward_weight: float | None = None,
) -> Batch:
    """`step_reward_weight`: None, no step rewards; else `turn_rewards`, each episode's step rewards
    per model turn times the weight (what they add to the turns' returns)."""
    for i, e in enumerate(episodes):
        if len(e.ids) > response_length:  # the loop never lets this happen; a silent cut would hide a bug
            raise ValueError(
                f"episode {i}: {len(e.ids)} response tokens exceed the budget of {response_length}"
            )
    gen = Generation(
        [e.ids for e in episodes],
        [e.log_probs for e in episodes],
        [e.finish_reason for e in episodes],
        policy_version=min((v for e in episodes for v in e.versions), default=0),
        token_versions=[e.versions for e in episodes],
    )
    batch = assemble(gen_batch, gen, n, pad_id, response_length)
    mask = torch.zeros((len(episodes), response_length), dtype=batch["response_mask"].dtype)
    for i, e in enumerate(episodes):
        mask[i, : len(e.mask)] = torch.tensor(e.mask, dtype=mask.dtype)
    batch["response_mask"] = mask
    # a row's version is its oldest model token's (observation tokens are not the policy's)
    batch["rollout_policy_version"] = oldest_version(
        batch["rollout_token_versions"], mask, gen.policy_version
    )
    batch["agent_turns"] = np.array([e.turns for e in episodes], dtype=object)
    batch["agent_tool_calls"] = np.array([e.tool_calls for e in episodes], dtype=object)
    batch["agent_invalid_actions"] = np.array([e.invalid_actions for e in episodes], dtype=object)
    batch["agent_tool_errors"] = np.array([e.tool_errors for e in episodes], dtype=object)
    batch["agent_truncated"] = np.array([e.truncated for e in episodes], dtype=object)
    if step_reward_weight is not None:
        rewards = np.empty(len(episodes), dtype=object)  # one list per row, whatever their lengths
        for i, e in enumerate(episodes):
            rewards[i] = [step_reward_weight * r for r in e.turn_rewards]
        batch["turn_rewards"] = rewards
    return batch


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def agent_metrics(episodes: list[Episode], stats: CallStats) -> dict[str, float]:
    turns = sum(e.turns for e in episodes)
    calls = sum(e.tool_calls for e in episodes)
    lat = np.array(stats.latencies, dtype=np.float64)
    out = {
        "agent/turns/mean": _mean([e.turns for e in episodes]),
        "agent/turns/max": float(max((e.turns for e in episodes), default=0)),
        "agent/tool_calls/mean": _mean([e.tool_calls for e in episodes]),
        # a turn is valid when it ended in a well-formed tool call or answer
        "agent/valid_action_ratio": sum(e.valid_actions for e in episodes) / turns if turns else 0.0,
        "agent/invalid_actions/mean": _mean([e.invalid_actions for e in episodes]),
        "agent/tool_error_ratio": stats.errors / calls if calls else 0.0,
        "agent/tool_latency_s/p50": float(np.percentile(lat, 50)) if lat.size else 0.0,
        "agent/tool_latency_s/p95": float(np.percentile(lat, 95)) if lat.size else 0.0,
        # where the rollout waited: the engine or the tools and environments
        "agent/wait_engine_s": stats.engine_s,
        "agent/wait_tools_s": stats.tools_s,
        "agent/truncated_ratio": _mean([float(e.truncated) for e in episodes]),
        "agent/answered_ratio": _mean([float(e.answered) for e in episodes]),
        "agent/obs_truncated/mean": _mean([e.obs_cut for e in episodes]),
        "agent/obs_tokens/mean": _mean([e.obs_tokens for e in episodes]),
        "agent/model_tokens/mean": _mean([e.model_tokens for e in episodes]),
    }
    # counts, not ratios: a fault is a rare event, and a count can be checked against what was injected
    for kind in ERROR_KINDS:
        out[f"agent/tool_errors/{kind}"] = float(stats.error_kinds.get(kind, 0))
    for tool, values in stats.per_tool.items():
        for key, vals in values.items():
            out[f"agent/tool/{tool}/{key}/mean"] = _mean(vals)
    return out
