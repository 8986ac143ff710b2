"""The range of every numeric setting of every config schema, as one table (`RANGES`), and the
readers of it; `checks.check_ranges` raises on a setting outside its rule. A numeric field without a
rule is held to `DEFAULT_RULE`, and tests/unit/test_config_ranges.py fails until it gets one."""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, NamedTuple

from turnrl.config.agent_schema import (
    FunctionAgentConfig,
    MultiTurnConfig,
    PythonToolConfig,
    SearchToolConfig,
)
from turnrl.config.rollout_schema import RolloutConfig, ServerConfig
from turnrl.config.schema import (
    ActorConfig,
    AlgorithmConfig,
    CriticConfig,
    CurriculumConfig,
    DataConfig,
    EvalConfig,
    FilterGroupsConfig,
    GiGPOConfig,
    JudgeConfig,
    KLControlConfig,
    ModelConfig,
    OptimConfig,
    OverlongBufferConfig,
    RefConfig,
    RewardConfig,
    RewardModelConfig,
    RolloutCorrectionConfig,
    TeacherConfig,
    TrainerConfig,
)
from turnrl.config.supervised_schema import SFTDataConfig, SupervisedDataConfig, SupervisedTrainerConfig


class Rule(NamedTuple):
    """The values a numeric setting may take. `spec` is what the error message says: `>= 0`, `> 0`,
    `in (0, 1]`, `finite`, or alternatives joined by ` or ` (`>= 1 or -1`, a bare number being a
    sentinel). NaN and +-inf are refused by every rule. `note` says what a sentinel value at the
    edge of the range means (the field's docstring's `0 = ...`), so the message explains why it is
    allowed."""

    spec: str
    note: str = ""


AT_LEAST_0, AT_LEAST_1, POSITIVE = Rule(">= 0"), Rule(">= 1"), Rule("> 0")
SEED = Rule("in [0, 4294967295]", "numpy's seed range")
DEFAULT_RULE = AT_LEAST_0
"""A numeric field missing from `RANGES` is held to this (tests/unit/test_config_ranges.py fails
until its rule is written down)."""

# schema class -> field -> rule. A field of a base class is found through the subclass (MRO). A
# section switched off (its `enable` is false) is not checked: nothing reads its settings.
RANGES: dict[type, dict[str, Rule]] = {
    DataConfig: {
        "train_batch_size": AT_LEAST_1,
        "val_batch_size": AT_LEAST_1,
        "max_prompt_length": AT_LEAST_1,
        "max_response_length": AT_LEAST_1,
    },
    CurriculumConfig: {
        "window": AT_LEAST_1,
        "revisit_prob": Rule("in [0, 1]", "0 = never, 1 = no skipping"),
        "pass_threshold": Rule("finite"),  # scores may be negative
    },
    ModelConfig: {"lora_rank": Rule(">= 0", "0 = full fine-tuning"), "lora_alpha": AT_LEAST_1},
    ServerConfig: {"timeout_s": POSITIVE, "max_retries": AT_LEAST_0, "startup_timeout_s": POSITIVE},
    RolloutConfig: {
        "n": AT_LEAST_1,
        "temperature": POSITIVE,  # training samples; greedy is for validation (val_temperature=0)
        "top_p": Rule("in (0, 1]"),
        "top_k": Rule(">= 0", "0 = off"),
        "generation_batch_size": AT_LEAST_1,
        "sync_every": Rule(">= 0", "0 = by device"),
        "val_temperature": Rule(">= 0", "0 = greedy"),
        "val_n": AT_LEAST_1,
    },
    MultiTurnConfig: {
        "max_turns": AT_LEAST_0,
        "max_obs_length": AT_LEAST_1,
        "max_tokens_per_turn": Rule(">= 0", "0 = up to the remaining response budget"),
        "tool_timeout": POSITIVE,
        "max_concurrent_calls": AT_LEAST_1,
        "mcp_startup_timeout_s": POSITIVE,
    },
    SearchToolConfig: {"topk": AT_LEAST_1},
    FunctionAgentConfig: {"max_concurrency": AT_LEAST_1, "timeout_s": POSITIVE, "max_calls": AT_LEAST_1},
    PythonToolConfig: {
        "run_timeout": POSITIVE,
        "memory_limit_mb": Rule(">= 1 or -1", "-1 = the server's default"),
        "workers": Rule(">= 0", "0 = one per CPU core"),
    },
    AlgorithmConfig: {
        "gamma": Rule("in [0, 1]"),
        "lam": Rule("in [0, 1]"),
        "distill_coef": Rule(">= 0", "0 = off"),
    },
    KLControlConfig: {"kl_coef": AT_LEAST_0, "target_kl": POSITIVE, "horizon": AT_LEAST_1},
    FilterGroupsConfig: {"max_num_gen_batches": AT_LEAST_1},
    GiGPOConfig: {"step_weight": Rule(">= 0", "0 = GRPO"), "gamma": Rule("in (0, 1]")},
    RolloutCorrectionConfig: {"tis_cap": POSITIVE, "mis_low": AT_LEAST_0, "mis_high": POSITIVE},
    OptimConfig: {
        "lr": POSITIVE,
        "lr_warmup_steps": AT_LEAST_0,
        "weight_decay": AT_LEAST_0,
        "betas": Rule("in [0, 1)"),  # each of the two
        "grad_clip": Rule(">= 0", "0 = off"),
    },
    ActorConfig: {
        "ppo_mini_batch_size": AT_LEAST_1,
        "ppo_micro_batch_size": AT_LEAST_1,
        "log_prob_micro_batch_size": AT_LEAST_1,
        "ppo_epochs": AT_LEAST_1,
        "clip_ratio_low": AT_LEAST_0,
        "clip_ratio_high": AT_LEAST_0,
        "clip_ratio_c": Rule("> 1", "dual-clip"),
        "entropy_coeff": Rule("finite"),  # negative: an entropy penalty
        "sapo_tau_pos": POSITIVE,
        "sapo_tau_neg": POSITIVE,
        "clip_cov_ratio": Rule("in [0, 1]", "0 = detach nothing"),
        "clip_cov_lb": AT_LEAST_0,  # <= clip_cov_ub (_check_algorithm)
        "clip_cov_ub": AT_LEAST_0,
        "kl_cov_ratio": Rule("in [0, 1]", "0 = penalise nothing"),
        "kl_cov_coef": AT_LEAST_0,
        "kl_loss_coef": AT_LEAST_0,
        "logprob_chunk_size": AT_LEAST_1,
        "ppo_max_token_len_per_gpu": AT_LEAST_1,
        "log_prob_max_token_len_per_gpu": AT_LEAST_1,
    },
    CriticConfig: {
        "ppo_epochs": AT_LEAST_1,
        "ppo_mini_batch_size": AT_LEAST_1,
        "ppo_micro_batch_size": AT_LEAST_1,
        "ppo_max_token_len_per_gpu": AT_LEAST_1,
        "forward_max_token_len_per_gpu": AT_LEAST_1,
        "cliprange_value": Rule(">= 0", "0 = no clipping"),
    },
    RefConfig: {
        "log_prob_micro_batch_size": AT_LEAST_1,
        "logprob_chunk_size": AT_LEAST_1,
        "log_prob_max_token_len_per_gpu": AT_LEAST_1,
    },
    TeacherConfig: {
        "log_prob_micro_batch_size": AT_LEAST_1,
        "logprob_chunk_size": AT_LEAST_1,
        "log_prob_max_token_len_per_gpu": AT_LEAST_1,
    },
    RewardModelConfig: {"coef": AT_LEAST_0, "micro_batch_size": AT_LEAST_1},
    OverlongBufferConfig: {"len": AT_LEAST_1, "penalty_factor": AT_LEAST_0},
    RewardConfig: {"timeout_s": Rule(">= 0", "0 = no limit")},
    JudgeConfig: {
        "max_score": POSITIVE,
        "coef": AT_LEAST_0,
        "temperature": Rule(">= 0", "0 = greedy"),
        "max_tokens": AT_LEAST_1,
        "concurrency": AT_LEAST_1,
        "timeout_s": POSITIVE,
        "max_retries": AT_LEAST_0,
        "cache_size": Rule(">= 0", "0 = no cache"),
        "startup_timeout_s": POSITIVE,
    },
    TrainerConfig: {
        "total_epochs": AT_LEAST_0,  # 0 only with total_training_steps (check_config)
        "total_training_steps": Rule(">= 0", "0 = run trainer.total_epochs"),
        "critic_warmup": AT_LEAST_0,
        "test_freq": Rule(">= 0", "0 = only before and after training"),
        "save_freq": Rule(">= 0", "0 = only at the end"),
        "max_checkpoints_to_keep": Rule(">= 0", "0 = keep all"),
        "rollout_dump_freq": Rule(">= 0", "0 = off"),
        "seed": SEED,
        "nnodes": AT_LEAST_1,
        "n_gpus_per_node": AT_LEAST_1,
        "num_threads": Rule(">= 0", "0 = torch's default"),
        "max_staleness": Rule(">= 0", "0 = no overlap"),
    },
    EvalConfig: {
        "max_prompts": Rule(">= 0", "0 = all"),
        "n": Rule(">= 0", "0 = no sampled pass"),
        "temperature": AT_LEAST_0,  # > 0 when there is a sampled pass (evaluate.inputs.check_eval)
        "top_p": Rule("in (0, 1]"),
        "top_k": Rule(">= 0", "0 = off"),
        "success_threshold": Rule("finite"),  # scores may be negative
    },
    SupervisedDataConfig: {"max_length": AT_LEAST_1, "length_window": Rule(">= 0", "0 = no sorting")},
    SFTDataConfig: {"max_obs_length": AT_LEAST_1},
    SupervisedTrainerConfig: {
        "total_epochs": AT_LEAST_0,  # 0 only with total_training_steps (supervised.checks)
        "total_training_steps": Rule(">= 0", "0 = run trainer.total_epochs"),
        "train_batch_size": AT_LEAST_1,
        "micro_batch_size": AT_LEAST_1,
        "test_freq": Rule(">= 0", "0 = only at the end"),
        "save_freq": Rule(">= 0", "0 = only at the end"),
        "max_checkpoints_to_keep": Rule(">= 0", "0 = keep all"),
        "seed": SEED,
        "num_threads": Rule(">= 0", "0 = torch's default"),
        "logprob_chunk_size": AT_LEAST_1,
    },
}

_NUMBER = r"-?\d+(?:\.\d*)?(?:e-?\d+)?"
_BOUND = re.compile(rf"(>=|>|<=|<) ({_NUMBER})")
_INTERVAL = re.compile(rf"in ([\[(])({_NUMBER}), ({_NUMBER})([\])])")
_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@cache
def accepts(spec: str) -> Callable[[float], bool]:
    """The test a rule's `spec` stands for (finiteness is checked apart); a spec it cannot read is
    a bug in `RANGES` and raises ValueError."""
    tests: list[Callable[[float], bool]] = []
    for alt in spec.split(" or "):
        if alt == "finite":
            tests.append(lambda v: True)
        elif m := _INTERVAL.fullmatch(alt):
            lo_open, lo, hi, hi_open = m[1] == "(", float(m[2]), float(m[3]), m[4] == ")"
            low = operator.gt if lo_open else operator.ge
            high = operator.lt if hi_open else operator.le
            tests.append(lambda v, lo=lo, hi=hi, low=low, high=high: low(v, lo) and high(v, hi))
        elif m := _BOUND.fullmatch(alt):
            tests.append(lambda v, op=_COMPARE[m[1]], x=float(m[2]): op(v, x))
        elif re.fullmatch(_NUMBER, alt):
            tests.append(lambda v, x=float(alt): v == x)  # a sentinel (-1 = the server's default)
        else:
            raise ValueError(f"unreadable range rule {spec!r}")
    return lambda v: any(t(v) for t in tests)


def rule_of(section: type, name: str) -> Rule | None:
    """The rule `RANGES` gives field `name` of `section` (or of a base class), None if none."""
    return next((RANGES[c][name] for c in section.__mro__ if name in RANGES.get(c, {})), None)


def numeric_settings(node: Any, prefix: str = "") -> Iterator[tuple[str, float, Rule]]:
    """Every number in the config tree (each element of a list of numbers too) with its dotted key
    and rule, skipping sections whose `enable` is false."""
    if getattr(node, "enable", True) is False:
        return
    for f in dataclasses.fields(node):
        value, key = getattr(node, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from numeric_settings(value, key + ".")
            continue
        rule = rule_of(type(node), f.name) or DEFAULT_RULE
        if _is_number(value):
            yield key, value, rule
        elif isinstance(value, list) and value and all(_is_number(v) for v in value):
            yield from ((f"{key}[{i}]", v, rule) for i, v in enumerate(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
