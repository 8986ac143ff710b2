"""Every field a training step writes into a `Batch`, declared once.

A field's record says its shape, its dtype, which stage writes it, which stages read it and what
it means, so that a reader can follow a field from the rollout to the loss here instead of by
grepping string keys. Names follow verl where the field is verl's (`old_log_probs`,
`ref_log_prob`, `entropys`, `token_level_scores`, `rollout_is_weights`, ...): recipes and readers
coming from verl find the same keys.

Shapes: B rows (prompts x `rollout.n` from stage `group` on), T_prompt prompt tokens (left
padded), T_resp response tokens (right padded to `data.max_response_length`), T = T_prompt +
T_resp. `object` fields are numpy object arrays of one Python value per row.

Writers and readers are the loop's stage names (`trainer/stages.STAGES`) or, for what no stage
writes, the component: `role:<name>` (a role's result batch), `metrics`, `dump` (the rollout
dump), `validation` (validation and `turnrl eval` samples), `inspector`.

With `strict` on (`TURNRL_STRICT_FIELDS=1`, or `set_strict(True)`, which the test suite does),
writing an undeclared field into a `Batch` raises `UndeclaredFieldError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    shape: str
    dtype: str
    writers: tuple[str, ...]
    readers: tuple[str, ...]
    meaning: str


class UndeclaredFieldError(KeyError):
    """A batch field that `turnrl/fields.py` does not declare."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def _f(name: str, shape: str, dtype: str, writers: str, readers: str, meaning: str) -> Field:
    return Field(name, shape, dtype, tuple(writers.split()), tuple(readers.split()), meaning)


_DECLARED = (
    # -- stage 1 (load_batch): one row per prompt, from data/loader.collate -------------------------
    _f(
        "input_ids",
        "(B, T)",
        "long",
        "load_batch gen",
        "gen_batch gen old_log_prob ref teacher values update_actor update_critic reward",
        "token ids: the left-padded prompt, then prompt + response",
    ),
    _f(
        "attention_mask",
        "(B, T)",
        "long",
        "load_batch gen",
        "gen old_log_prob ref teacher values update_actor update_critic metrics",
        "1 on real tokens, 0 on padding",
    ),
    _f(
        "position_ids",
        "(B, T)",
        "long",
        "load_batch gen",
        "old_log_prob ref teacher values update_actor update_critic",
        "positions counted over the attended tokens only",
    ),
    _f(
        "data_source",
        "(B,)",
        "object str",
        "load_batch",
        "gen reward metrics dump",
        "which dataset or task a row comes from; picks its rule scorer",
    ),
    _f(
        "ground_truth",
        "(B,)",
        "object",
        "load_batch",
        "gen reward dump",
        "the reference answer the scorer checks",
    ),
    _f(
        "extra_info",
        "(B,)",
        "object dict",
        "load_batch",
        "gen reward",
        "the row's free-form extras, for scorers (and agent functions)",
    ),
    _f(
        "index",
        "(B,)",
        "object int",
        "load_batch",
        "gen group reward validation",
        "the prompt's row number in its dataset",
    ),
    _f(
        "raw_prompt",
        "(B,)",
        "object list",
        "load_batch",
        "gen reward validation inspector",
        "the prompt as chat messages (agents and reward models re-render it)",
    ),
    # -- stage 3 (gen): rollout/base.assemble and agent/assemble -------------------------------------
    _f("prompts", "(B, T_prompt)", "long", "gen", "inspector", "the prompt ids, repeated n times"),
    _f(
        "responses",
        "(B, T_resp)",
        "long",
        "gen",
        "reward old_log_prob adv update_actor update_critic dump metrics",
        "sampled response ids, right-padded (agent: model and observation tokens)",
    ),
    _f(
        "response_mask",
        "(B, T_resp)",
        "float32",
        "gen",
        "reward old_log_prob ref teacher values kl_in_reward adv update_actor update_critic metrics",
        "1 on model-sampled tokens: what the losses average over",
    ),
    _f(
        "rollout_log_probs",
        "(B, T_resp)",
        "float32",
        "gen",
        "old_log_prob",
        "the engine's log p(token) at sampling time (0 off the response)",
    ),
    _f(
        "rollout_policy_version",
        "(B,)",
        "long",
        "gen",
        "metrics",
        "policy version of the row's oldest model token (async staleness)",
    ),
    _f(
        "rollout_token_versions",
        "(B, T_resp)",
        "long",
        "gen",
        "metrics",
        "policy version that sampled each token",
    ),
    _f(
        "finish_reason",
        "(B,)",
        "object str",
        "gen",
        "metrics dump validation inspector",
        "'stop' (EOS or stop string) or 'length'",
    ),
    _f("agent_turns", "(B,)", "object int", "gen", "metrics", "model turns of the agent episode"),
    _f("agent_tool_calls", "(B,)", "object int", "gen", "metrics", "tool calls the episode made"),
    _f("agent_invalid_actions", "(B,)", "object int", "gen", "metrics", "turns whose action did not parse"),
    _f("agent_tool_errors", "(B,)", "object int", "gen", "metrics", "tool calls that returned an error"),
    _f("agent_truncated", "(B,)", "object bool", "gen", "metrics", "the episode ran out of turns or tokens"),
    _f(
        "turn_rewards",
        "(B,)",
        "object list[float]",
        "gen",
        "adv",
        "one step reward per model turn, times rollout.multi_turn.step_reward_weight "
        "(`rollout.multi_turn.step_rewards`): what each turn adds to the turns' returns (gigpo, turn_rloo)",
    ),
    # a function agent's (`rollout.agent`) own reward, carried to the reward stage (rewards/carried.py)
    _f(
        "agent_reward",
        "(B,)",
        "object float|None",
        "gen",
        "reward",
        "the reward the agent function returned; None = score `agent_answer` (or the response) by rule",
    ),
    _f(
        "agent_answer",
        "(B,)",
        "object str|None",
        "gen",
        "reward",
        "the last assistant message of the messages an agent function returned: the text its rule scores",
    ),
    _f(
        "agent_error",
        "(B,)",
        "object str",
        "gen",
        "reward",
        "why the agent function's episode failed, one line ('' = it did not): scored 0 or stops the run",
    ),
    _f(
        "agent_rates",
        "(B,)",
        "object dict",
        "gen",
        "reward",
        "the `acc` and `formatted` numbers an agent function returned: validation's accuracy and format rate",
    ),
    _f(
        "episode_row",
        "(B,)",
        "int64",
        "gen",
        "group gen_max",
        "an agent function's episode of this row: its position among the prompts x n (an episode that "
        "forked at template drift gives several rows, adjacent)",
    ),
    _f(
        "episode_last",
        "(B,)",
        "bool",
        "gen",
        "adv update_actor update_critic validation",
        "True on an episode's last row: mini-batches, per-episode advantages and validation averages "
        "count episodes, not forks (absent = every row is an episode)",
    ),
    # -- stages 4-6 (group, reward, gen_max) --------------------------------------------------------
    _f(
        "uid",
        "(B,)",
        "object",
        "group",
        "adv old_log_prob ref values update_actor update_critic inspector",
        "the prompt's id, shared by its n samples: a GRPO group, kept whole on one rank",
    ),
    _f(
        "token_level_scores",
        "(B, T_resp)",
        "float32",
        "reward",
        "kl_in_reward adv metrics dump",
        "the sequence score at the last model token, 0 elsewhere",
    ),
    _f(
        "rm_scores",
        "(B,)",
        "float32",
        "role:reward_model",
        "reward",
        "the reward model's score of prompt + response (added to token_level_scores)",
    ),
    _f("reward_baselines", "(B,)", "float32", "gen_max", "adv", "ReMax: the score of a greedy response"),
    # -- stages 7-11 (old_log_prob, ref, values, kl_in_reward, adv) ----------------------------------
    _f(
        "log_probs",
        "(B, T_resp)",
        "float32",
        "role:actor",
        "old_log_prob inspector",
        "the actor's log p(token) at the rollout temperature (its compute_log_prob result)",
    ),
    _f("entropys", "(B, T_resp)", "float32", "role:actor", "old_log_prob", "the actor's per-token entropy"),
    _f(
        "old_log_probs",
        "(B, T_resp)",
        "float32",
        "old_log_prob",
        "kl_in_reward adv update_actor inspector",
        "log p(token) under the step-start policy: the PPO ratio's denominator (opd: the student's)",
    ),
    _f(
        "rollout_is_weights",
        "(B, T_resp)",
        "float32",
        "old_log_prob",
        "update_actor",
        "TIS/MIS importance weights of engine vs trainer log-probs",
    ),
    _f(
        "rollout_keep_mask",
        "(B, T_resp)",
        "float32",
        "old_log_prob",
        "update_actor",
        "response_mask without the tokens MIS dropped",
    ),
    _f(
        "ref_log_prob",
        "(B, T_resp)",
        "float32",
        "ref",
        "kl_in_reward update_actor",
        "log p(token) under the reference (start) policy",
    ),
    _f(
        "teacher_log_prob",
        "(B, T_resp)",
        "float32",
        "teacher",
        "adv metrics",
        "log p(token) under the distillation teacher (`teacher.model.path`) at the rollout temperature",
    ),
    _f(
        "values",
        "(B, T_resp)",
        "float32",
        "values",
        "adv update_critic",
        "the critic's V(s_t), 0 off the response",
    ),
    _f(
        "token_level_rewards",
        "(B, T_resp)",
        "float32",
        "kl_in_reward adv",
        "adv metrics dump",
        "token_level_scores minus the KL penalty (the scores themselves without one)",
    ),
    _f("advantages", "(B, T_resp)", "float32", "adv", "update_actor metrics", "the estimator's advantages"),
    _f(
        "returns", "(B, T_resp)", "float32", "adv", "update_critic metrics", "the critic's regression targets"
    ),
    # -- update_actor diagnostics (the first micro-batch; inspector only) ----------------------------
    _f("ratio", "(b, T_resp)", "float32", "update_actor", "inspector", "pi / pi_old per token"),
    _f("clipped", "(b, T_resp)", "bool", "update_actor", "inspector", "the PPO clip was active"),
    _f("dual_clipped", "(b, T_resp)", "bool", "update_actor", "inspector", "the dual clip was active"),
    _f("pg_loss", "(b, T_resp)", "float32", "update_actor", "inspector", "the per-token policy loss"),
    # -- the step inspector's after_update pass -------------------------------------------------------
    _f(
        "log_probs_after", "(B, T_resp)", "float32", "inspector", "inspector", "log p(token) after the update"
    ),
    _f(
        "ratio_after",
        "(B, T_resp)",
        "float32",
        "inspector",
        "inspector",
        "the ratio the next epoch would see",
    ),
    _f(
        "outside_clip",
        "(B, T_resp)",
        "bool",
        "inspector",
        "inspector",
        "that ratio is outside the clip range",
    ),
)

FIELDS: dict[str, Field] = {f.name: f for f in _DECLARED}

_strict = os.environ.get("TURNRL_STRICT_FIELDS", "") not in ("", "0")


def set_strict(on: bool) -> None:
    """Check every field written into a `Batch` against `FIELDS` (the test suite turns this on)."""
    global _strict
    _strict = on


def strict() -> bool:
    return _strict


def check_names(names: Iterable[str]) -> None:
    """Raise `UndeclaredFieldError` for the first name `FIELDS` does not declare (in strict mode)."""
    if not _strict:
        return
    for name in names:
        if name not in FIELDS:
            raise UndeclaredFieldError(
                f"batch field '{name}' is not declared: add it to src/turnrl/fields.py "
                "(shape, dtype, writer, readers, meaning) or use a declared name"
            )
