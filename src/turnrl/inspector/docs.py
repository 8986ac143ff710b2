"""What each stage of a training step is for: the texts `turnrl trace` prints next to the tensors.

`STAGE_DOCS` is keyed by exactly the trainer's stage names (`turnrl.trainer.stages.STAGES`, in
their order; they double as `timing_s/<name>` metric keys), then the inspector's own two
pseudo-stages `INSPECTOR_STAGES`. A unit test holds the keys to that set, so a stage added to the
loop without a text here fails the tests, not a user's trace.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageDoc:
    title: str
    inputs: str
    why: str


# recorded by the inspector itself, after the trainer's stages
INSPECTOR_STAGES: tuple[str, ...] = ("after_update", "metrics")

STAGE_DOCS: dict[str, StageDoc] = {
    "load_batch": StageDoc(
        "Load a batch of prompts",
        "dataloader rows",
        "The dataloader turns dataset rows into left-padded prompt ids, so every prompt ends in the "
        "same column and generation can start for all of them at once. The non-tensor fields "
        "(data source, ground truth, extra info) ride along untouched until the reward needs them.",
    ),
    "gen_batch": StageDoc(
        "Split off the generation input",
        "the prompt batch",
        "The rollout engine needs nothing but the prompt tensors, so they are popped out of the batch "
        "and sent alone. The rest of the batch waits for the responses and is merged back in the group stage.",
    ),
    "gen": StageDoc(
        "Rollout: sample responses",
        "the prompt tensors",
        "The policy samples `rollout.n` responses per prompt (interleaved A,A,B,B); in agent mode it "
        "alternates turns with tool observations, appended with response_mask 0. The engine keeps "
        "the exact sampled ids and their log-probs, so the trainer scores the very tokens the policy produced.",
    ),
    "group": StageDoc(
        "Group the samples and merge",
        "the waiting batch and the rollout",
        "Each prompt row is repeated n times like the rollout, and its samples share one `uid` (the "
        "prompt's index), which is what group-relative estimators such as GRPO average over. "
        "Merging checks that every field lines up row by row with its response.",
    ),
    "reward": StageDoc(
        "Score the responses",
        "decoded responses, ground truth",
        "The reward function of each row's data source scores the decoded response, and the score "
        "lands on the last model token of the response (`token_level_scores`). "
        "There it stays inside the sequence the policy produced, never on an observation or a pad.",
    ),
    "gen_max": StageDoc(
        "ReMax: the greedy baseline",
        "the prompt tensors",
        "ReMax samples one more response per prompt, greedily (temperature 0), and scores it like the "
        "others; that score, repeated over the prompt's samples, is the baseline (`reward_baselines`) "
        "the advantage subtracts. One greedy rollout per prompt replaces a critic.",
    ),
    "old_log_prob": StageDoc(
        "Old log-probs",
        "the merged batch",
        "The trainer recomputes the log-probability of every response token with its own forward pass "
        "at the sampling temperature: `old_log_probs`, the denominator of the PPO ratio. "
        "Comparing them with the engine's `rollout_log_probs` exposes an engine that samples from a "
        "different distribution than the one being trained.",
    ),
    "ref": StageDoc(
        "Reference log-probs",
        "the merged batch",
        "The frozen starting policy scores the same tokens (`ref_log_prob`). "
        "The KL between policy and reference keeps the update from drifting far from where it started.",
    ),
    "teacher": StageDoc(
        "Teacher log-probs (on-policy distillation)",
        "the merged batch",
        "A stronger model with the same tokenizer scores the tokens the student itself sampled "
        "(`teacher_log_prob`). Where the teacher finds a token likelier than the student did, the "
        "token's advantage is positive: the student learns from its own mistakes, token by token.",
    ),
    "values": StageDoc(
        "Critic values",
        "the merged batch",
        "The critic estimates the return from every response position (`values`). "
        "GAE uses these estimates as the baseline that turns rewards into advantages.",
    ),
    "kl_in_reward": StageDoc(
        "KL penalty in the reward",
        "scores, old and reference log-probs",
        "The per-token reward becomes score minus beta times the KL to the reference "
        "(`token_level_rewards`, `kl`). It charges the policy for every token it moves away from the "
        "reference, not only at the end.",
    ),
    "adv": StageDoc(
        "Advantages and returns",
        "rewards, values, masks, uid",
        "The estimator turns rewards into a per-token advantage, the signal that says which tokens to "
        "make more or less likely; group estimators compare each sample with the others of its `uid`. "
        "Only model tokens get an advantage: observation and padding positions stay 0.",
    ),
    "update_critic": StageDoc(
        "Update the critic",
        "values, returns",
        "The critic regresses its values towards the returns with a clipped value loss. "
        "A better critic gives lower-variance advantages in the next step.",
    ),
    "update_actor": StageDoc(
        "Update the actor (PPO)",
        "old log-probs, advantages, masks",
        "The policy's new log-probs give the ratio pi/pi_old per token, and the clipped surrogate "
        "loss takes away any gain from moving a token's ratio beyond [1 - eps, 1 + eps], which keeps "
        "one step from changing the policy too much. Shown: the first micro-batch of the update.",
    ),
    "sync_weights": StageDoc(
        "Sync the rollout engine's weights",
        "the updated actor",
        "The rollout engine takes the policy version the update produced, so the next step samples "
        "from the new policy. For the in-process engine, whose module is the actor's own, it is a no-op; "
        "a server engine loads the new weights. Every sample records the `rollout_policy_version` "
        "that generated it, which is how a stale sample is told from a fresh one.",
    ),
    "after_update": StageDoc(
        "The policy after the update",
        "the updated policy, old log-probs",
        "The trace scores the step's responses again with the updated policy: the ratio new/old per "
        "token shows how far one optimizer step moved each token's probability. "
        "Tokens outside the clip range are the ones the next PPO epoch would clip.",
    ),
    "metrics": StageDoc(
        "Losses and metrics",
        "everything above",
        "The step's losses, data statistics and timings, named as they appear in `metrics.jsonl` "
        "and the loggers. These are the numbers `turnrl report` plots over a run.",
    ),
}

# the per-token field a stage is about: response tokens are coloured by it
FOCUS: dict[str, tuple[str, ...]] = {
    "gen": ("rollout_log_probs",),
    "group": ("rollout_log_probs",),
    "reward": ("token_level_scores",),
    "old_log_prob": ("old_log_probs",),
    "ref": ("ref_log_prob",),
    "teacher": ("teacher_log_prob",),
    "values": ("values",),
    "kl_in_reward": ("kl", "token_level_rewards"),
    "adv": ("advantages",),
    "update_critic": ("values", "returns"),
    "update_actor": ("ratio", "pg_loss"),
    "after_update": ("ratio_after",),
}


def stage_doc(name: str) -> StageDoc:
    """The text of a recorded stage; a stage recorded twice (`gen#2`) shares its first's text."""
    base = name.split("#", 1)[0]
    doc = STAGE_DOCS.get(base)
    if doc is None:
        raise KeyError(f"no inspector text for stage '{base}'; add it to STAGE_DOCS in {__name__}")
    return doc


def focus_fields(name: str) -> tuple[str, ...]:
    """The per-token fields a recorded stage is about, most telling first."""
    return FOCUS.get(name.split("#", 1)[0], ())
