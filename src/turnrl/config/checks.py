"""Every rule of the config, in one place: `check_config(cfg)`.

The range of every numeric setting, in every schema (`turnrl train` / `eval` / `trace`, `turnrl sft`
/ `rm`), is one table, `RANGES`, checked by `check_ranges`; the cross-field rules follow it.
`load_config` runs the checks on what it builds and the Trainer runs them again, so a Config made in
code is checked too. They only read the config (idempotent) and import nothing heavy (cheap).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
import shlex
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
    Config,
    CriticConfig,
    CurriculumConfig,
    DataConfig,
    EvalConfig,
    FilterGroupsConfig,
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
from turnrl.errors import TurnrlInputError

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")
DTYPES = ("auto", "float32", "bfloat16", "float16")
MULTI_TURN_FORMATS = ("xml", "json")
ENGINES = ("hf", "server", "vllm")
ON_ERROR_MODES = ("fail", "zero", "fail_first_step")
"""`reward.on_error`: what a failing reward function does (the reward scorer reads it)."""
BUILT_IN_TASKS = ("addition", "calculator", "code", "search")
"""`data.task`: the built-in tasks' names; the task registry holds one writer per name (a test keeps
the two equal), declared here so that checking a config needs no task code."""
SAMPLERS = ("plain", "curriculum")
"""`data.sampler`: the training prompts' order (`turnrl.data.curriculum.make_loader`)."""
REASONING_GYM = "reasoning_gym:"
"""`data.task` prefix of a reasoning-gym dataset (`turnrl.tasks.gym.PREFIX`)."""


class ConfigError(TurnrlInputError):
    """A bad recipe or override; the message is one line naming the key and the fix."""


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


def check_ranges(cfg: Any) -> None:
    """Raise ConfigError naming the first numeric setting outside its `RANGES` rule, or NaN/inf:
    `'trainer.total_training_steps' must be >= 0 (0 = run trainer.total_epochs), got -1`."""
    for key, value, (spec, note) in numeric_settings(cfg):
        finite = math.isfinite(value)
        if finite and accepts(spec)(value):
            continue
        want = spec if finite or spec == "finite" else f"finite and {spec}"
        why = f" ({note})" if note else ""
        raise ConfigError(f"'{key}' must be {want}{why}, got {value}")


def check_config(cfg: Config) -> None:
    """Raise ConfigError naming the first key that breaks a rule a type system cannot express."""
    check_ranges(cfg)  # first: the cross-field rules below divide by sizes and compare lengths
    t = cfg.trainer
    if t.total_training_steps == 0 and t.total_epochs == 0:
        raise ConfigError("'trainer.total_epochs'=0 with trainer.total_training_steps=0 trains nothing")
    _check_sizes_and_sampling(cfg)
    _check_algorithm(cfg)
    _check_data(cfg)
    _check_distributed(cfg)
    _check_rollout_engine(cfg)
    _check_rollout_correction(cfg)
    _check_async(cfg)
    if cfg.rollout.multi_turn.enable:
        _check_multi_turn(cfg.rollout.multi_turn)
    if cfg.rollout.agent.entrypoint or cfg.rollout.agent.env:
        _check_function_agent(cfg)


def _check_distributed(cfg: Config) -> None:
    """Data-parallel ranks split every batch by whole prompt groups: sizes in prompts must divide."""
    t = cfg.trainer
    world = t.nnodes * t.n_gpus_per_node
    if cfg.model.fsdp_offload and (world == 1 or t.device == "cpu"):
        raise ConfigError(
            "'model.fsdp_offload' moves sharded state between GPU and CPU memory: it needs several ranks "
            "on GPUs (trainer.n_gpus_per_node > 1, trainer.device auto or cuda)"
        )
    if world == 1:
        return
    if t.nnodes > 1 and not t.ray_address:
        raise ConfigError(
            "'trainer.nnodes' > 1 needs 'trainer.ray_address' (the head printed by `ray start --head`)"
        )
    sizes = [
        ("data.train_batch_size", cfg.data.train_batch_size),
        ("actor.ppo_mini_batch_size", cfg.actor.ppo_mini_batch_size),
    ]
    if cfg.critic.enable:
        sizes.append(("critic.ppo_mini_batch_size", cfg.critic.ppo_mini_batch_size))
    for key, value in sizes:
        if value % world:
            raise ConfigError(
                f"'{key}'={value} prompts does not divide over {world} data-parallel ranks "
                f"(trainer.nnodes x trainer.n_gpus_per_node); pick a multiple of {world}"
            )
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            f'{world} ranks (trainer.nnodes x trainer.n_gpus_per_node) need Ray: pip install -e ".[distributed]"'
        )


def _check_rollout_engine(cfg: Config) -> None:
    r = cfg.rollout
    _one_of("rollout.engine", r.engine, ENGINES)
    sv = r.server
    _one_of("rollout.server.device", sv.device, ("auto", "cpu", "cuda"))
    for url in sv.urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"'rollout.server.urls' entry '{url}' is not an http(s):// URL")
    if r.engine == "server" and not sv.urls and cfg.trainer.nnodes > 1:
        raise ConfigError(
            "'rollout.engine=server' on several machines needs 'rollout.server.urls' (servers every node reaches); "
            "the child server is for one machine"
        )
    if r.engine == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("'rollout.engine=vllm' needs vLLM: pip install 'turnrl[vllm]'")


def _check_async(cfg: Config) -> None:
    t = cfg.trainer
    _one_of("trainer.mode", t.mode, ("sync", "async"))
    if t.mode != "async":
        return
    if cfg.rollout.engine != "server":
        raise ConfigError(
            "'trainer.mode=async' generates in inference servers while the trainer updates: "
            f"set rollout.engine=server (got '{cfg.rollout.engine}')"
        )
    if t.nnodes * t.n_gpus_per_node > 1:
        raise ConfigError(
            "'trainer.mode=async' runs the trainer in one process for now: set trainer.nnodes=1 and "
            "trainer.n_gpus_per_node=1 (the inference servers may live anywhere)"
        )
    from turnrl.algorithms.rollout_corr import bypass_choice

    if bypass_choice(cfg.algorithm.rollout_correction.bypass) == "true" and t.max_staleness > 0:
        raise ConfigError(
            "'algorithm.rollout_correction.bypass=true' is exact only on-policy; async samples may be "
            f"{t.max_staleness} versions old: use mode=tis or mis instead"
        )


def _check_rollout_correction(cfg: Config) -> None:
    from turnrl.algorithms.rollout_corr import (
        BYPASS_CHOICES,
        CORRECTION_LEVELS,
        CORRECTION_MODES,
        bypass_choice,
    )

    rc = cfg.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    _one_of(f"{key}.mode", rc.mode, CORRECTION_MODES)
    _one_of(f"{key}.level", rc.level, CORRECTION_LEVELS)
    if not rc.mis_low < rc.mis_high:  # each one's range is in RANGES
        raise ConfigError(f"'{key}' needs 0 <= mis_low < mis_high, got [{rc.mis_low}, {rc.mis_high}]")
    bypass = bypass_choice(rc.bypass)
    _one_of(f"{key}.bypass", bypass, BYPASS_CHOICES)
    if bypass == "true" and rc.mode != "none":
        raise ConfigError(
            f"'{key}.bypass=true' uses the rollout's log-probs as the old ones, so there is no "
            f"gap to correct: set {key}.mode=none"
        )


def _one_of(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown '{key}' '{value}'; valid: {', '.join(valid)}")


def _check_sizes_and_sampling(cfg: Config) -> None:
    d, a = cfg.data, cfg.actor  # every size is >= 1 (RANGES)
    if d.train_batch_size % a.ppo_mini_batch_size:
        raise ConfigError(
            f"'data.train_batch_size'={d.train_batch_size} prompts does not divide into "
            f"'actor.ppo_mini_batch_size'={a.ppo_mini_batch_size} prompts; pick a divisor"
        )
    _check_token_budgets(cfg)
    if cfg.model.dtype not in DTYPES:
        raise ConfigError(
            f"'model.dtype' must be auto, float32, bfloat16 or float16, got '{cfg.model.dtype}'"
        )
    bad_loggers = set(cfg.trainer.logger) - set(LOGGERS)
    if bad_loggers:
        raise ConfigError(f"unknown 'trainer.logger' {sorted(bad_loggers)}; valid: {', '.join(LOGGERS)}")


def _check_token_budgets(cfg: Config) -> None:
    """A dynamic micro-batch holds at least one whole sequence: a budget below the longest
    possible prompt + response could not run that row at all."""
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    a, ref, c, teacher = cfg.actor, cfg.ref, cfg.critic, cfg.teacher
    budgets = {
        "actor.ppo_max_token_len_per_gpu": (a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu),
        "actor.log_prob_max_token_len_per_gpu": (a.use_dynamic_bsz, a.log_prob_max_token_len_per_gpu),
        "ref.log_prob_max_token_len_per_gpu": (
            ref.log_prob_use_dynamic_bsz,
            ref.log_prob_max_token_len_per_gpu,
        ),
        "teacher.log_prob_max_token_len_per_gpu": (
            teacher.log_prob_use_dynamic_bsz and bool(teacher.model.path),
            teacher.log_prob_max_token_len_per_gpu,
        ),
        "critic.ppo_max_token_len_per_gpu": (c.use_dynamic_bsz, c.ppo_max_token_len_per_gpu),
        "critic.forward_max_token_len_per_gpu": (c.use_dynamic_bsz, c.forward_max_token_len_per_gpu),
    }
    for key, (on, budget) in budgets.items():
        if on and budget < longest:
            raise ConfigError(
                f"'{key}'={budget} cannot hold one sequence of data.max_prompt_length + "
                f"data.max_response_length = {longest} tokens; raise it to at least {longest}"
            )


def _check_algorithm(cfg: Config) -> None:
    # the valid names live beside the code that uses them (and import torch): imported on first check
    from turnrl.algorithms.advantages import ADV_ESTIMATORS
    from turnrl.algorithms.core import LOSS_AGG_MODES
    from turnrl.algorithms.kl import KL_CONTROLLERS, KL_ESTIMATORS
    from turnrl.algorithms.losses import POLICY_LOSS_MODES

    alg, actor, n = cfg.algorithm, cfg.actor, cfg.rollout.n
    est = alg.adv_estimator
    _one_of("algorithm.adv_estimator", est, ADV_ESTIMATORS)
    if est in ("grpo", "rloo", "reinforce_plus_plus_baseline") and n < 2:
        raise ConfigError(f"'{est}' needs 'rollout.n' >= 2 (a group of one has no baseline), got {n}")
    _one_of("actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    _one_of("critic.loss_agg_mode", cfg.critic.loss_agg_mode, LOSS_AGG_MODES)
    _one_of("actor.policy_loss_mode", actor.policy_loss_mode, POLICY_LOSS_MODES)
    if actor.policy_loss_mode == "clip_cov" and actor.clip_cov_lb > actor.clip_cov_ub:
        raise ConfigError(
            f"'actor.clip_cov_lb'={actor.clip_cov_lb} is above 'actor.clip_cov_ub'={actor.clip_cov_ub}: "
            "no token could be detached; lower clip_cov_lb or raise clip_cov_ub"
        )
    low, mode = actor.clip_ratio_low, actor.policy_loss_mode
    if low >= 1.0 and not (mode == "gmpo" or (mode == "cispo" and low == 1.0)):
        raise ConfigError(
            f"'actor.clip_ratio_low'={low} leaves no ratio above the lower bound 1 - clip_ratio_low; "
            "it must be < 1 (1 only for cispo: no lower bound; gmpo reads it in log space)"
        )
    _one_of("algorithm.kl_penalty", alg.kl_penalty, KL_ESTIMATORS)
    _one_of("actor.kl_loss_type", actor.kl_loss_type, KL_ESTIMATORS)
    _one_of("algorithm.kl_ctrl.type", alg.kl_ctrl.type, KL_CONTROLLERS)
    if est == "gae" and not cfg.critic.enable:
        raise ConfigError("'algorithm.adv_estimator=gae' needs a critic: set critic.enable=true")
    needs_ref = [
        k
        for k, on in (
            ("actor.use_kl_loss", actor.use_kl_loss),
            ("algorithm.use_kl_in_reward", alg.use_kl_in_reward),
        )
        if on
    ]
    if needs_ref and not cfg.ref.enable:
        raise ConfigError(f"'{needs_ref[0]}=true' needs the reference policy: set ref.enable=true")
    _check_distillation(cfg)
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        raise ConfigError("'reward_model.enable=true' needs 'reward_model.model.path'")
    if cfg.critic.enable and cfg.data.train_batch_size % cfg.critic.ppo_mini_batch_size:
        raise ConfigError(
            f"'data.train_batch_size'={cfg.data.train_batch_size} prompts does not divide into "
            f"'critic.ppo_mini_batch_size'={cfg.critic.ppo_mini_batch_size} prompts; pick a divisor"
        )
    _one_of("reward.on_error", cfg.reward.on_error, ON_ERROR_MODES)
    if cfg.reward.judge.enable:
        _check_judge(cfg.reward.judge)
    ob = cfg.reward.overlong_buffer
    if ob.enable and not 0 < ob.len < cfg.data.max_response_length:
        raise ConfigError(
            f"'reward.overlong_buffer.len' must be in (0, data.max_response_length), got {ob.len}"
        )


def _check_distillation(cfg: Config) -> None:
    """On-policy distillation needs a teacher, and a teacher needs a use: loading a model nothing
    reads costs memory and a forward pass per step, so it is refused rather than ignored."""
    alg, teacher = cfg.algorithm, cfg.teacher.model.path
    opd = alg.adv_estimator == "opd"
    if opd and alg.distill_coef > 0:
        raise ConfigError(
            f"'algorithm.distill_coef'={alg.distill_coef} adds the distillation term to another estimator's "
            "advantages; with algorithm.adv_estimator=opd it is the advantage already: set distill_coef=0"
        )
    if not teacher and (opd or alg.distill_coef > 0):
        use = "algorithm.adv_estimator=opd" if opd else f"algorithm.distill_coef={alg.distill_coef}"
        raise ConfigError(
            f"'{use}' distills from a teacher: set teacher.model.path (a model with the policy's tokenizer)"
        )
    if teacher and not opd and alg.distill_coef == 0:
        raise ConfigError(
            f"'teacher.model.path'={teacher} is set but nothing uses the teacher: set algorithm.adv_estimator=opd "
            "or algorithm.distill_coef > 0, or leave teacher.model.path empty"
        )


JUDGE_FIELDS = ("prompt", "response", "ground_truth")
"""The placeholders of `reward.judge.prompt` (`turnrl.rewards.judge.fill` fills them)."""


def _check_judge(j: JudgeConfig) -> None:
    """`reward.judge` with `enable=true`: checked before any model loads or judge starts."""
    key = "reward.judge"
    if not j.url and not j.model:
        raise ConfigError(
            f"'{key}.enable=true' needs '{key}.url' (an OpenAI-compatible endpoint) or '{key}.model' "
            "(a model for a turnrl serve child)"
        )
    if j.url and not j.url.startswith(("http://", "https://")):
        raise ConfigError(f"'{key}.url' '{j.url}' is not an http(s):// URL")
    _one_of(f"{key}.device", j.device, ("auto", "cpu", "cuda"))
    if "{response}" not in j.prompt:
        raise ConfigError(
            f"'{key}.prompt' has no {{response}} placeholder: the judge would never see the response "
            f"(placeholders: {', '.join('{' + f + '}' for f in JUDGE_FIELDS)})"
        )
    try:
        groups = re.compile(j.score_pattern).groups
    except re.error as err:
        raise ConfigError(f"'{key}.score_pattern' '{j.score_pattern}' is not a regex: {err}") from None
    if groups != 1:
        raise ConfigError(
            f"'{key}.score_pattern' '{j.score_pattern}' has {groups} groups; it needs exactly one, around "
            r"the number (e.g. 'Score:\s*([0-9.]+)'; write other groups as (?:...))"
        )
    import importlib.util

    if importlib.util.find_spec("openai") is None:  # the judge's client: found missing before anything loads
        raise ConfigError(
            f"'{key}.enable=true' needs the openai package: pip install -e \".[agents]\" (or pip install openai)"
        )


def _check_data(cfg: Config) -> None:
    d = cfg.data
    _one_of("data.sampler", d.sampler, SAMPLERS)
    if d.sampler == "curriculum" and cfg.rollout.n < 2:
        raise ConfigError(
            "'data.sampler=curriculum' skips prompts whose groups scored all alike; with rollout.n=1 every "
            "group does: set rollout.n >= 2"
        )
    if d.train_files and d.val_files:
        return  # the built-in task is only written when a split has no files
    # a reasoning-gym dataset's name is checked where its rows are made: that needs the package
    if d.task.startswith(REASONING_GYM) and d.task != REASONING_GYM:
        return
    if d.task not in BUILT_IN_TASKS:
        raise ConfigError(
            f"unknown 'data.task' '{d.task}'; valid: {', '.join(BUILT_IN_TASKS)}, or "
            f"{REASONING_GYM}<dataset> (e.g. {REASONING_GYM}chain_sum)"
        )


def _check_multi_turn(mt: MultiTurnConfig) -> None:
    """`rollout.multi_turn` with `enable=true`: checked before any tool server starts (its numbers'
    ranges are in RANGES)."""
    key = "rollout.multi_turn"
    if mt.format not in MULTI_TURN_FORMATS:
        raise ConfigError(f"'{key}.format' must be xml or json, got '{mt.format}'")
    if not mt.answer_tag.strip():
        raise ConfigError(f"'{key}.answer_tag' must not be empty")
    if not mt.tools and not mt.custom_tools and not mt.mcp_servers:
        raise ConfigError(f"{key} is enabled but names no tool ({key}.tools / custom_tools / mcp_servers)")
    for i, command in enumerate(mt.mcp_servers):  # found before any model loads or server starts
        try:
            argv = shlex.split(command) if isinstance(command, str) else None
        except ValueError as err:
            raise ConfigError(
                f"'{key}.mcp_servers[{i}]' \"{command}\" is not a command line ({err})"
            ) from None
        if not argv:
            raise ConfigError(f"'{key}.mcp_servers[{i}]' must be a command line, got {command!r}")


ENTRYPOINT = re.compile(r"[^:]+:[A-Za-z_]\w*")
"""`rollout.agent.entrypoint`: `path/to/file.py:run` or `package.module:run`."""
ENV_PREFIX = "verifiers:"
"""`rollout.agent.env`: the one kind of environment so far (`turnrl.agent.verifiers_env.PREFIX`)."""


def _check_function_agent(cfg: Config) -> None:
    """`rollout.agent` with an entrypoint: its form is checked here; whether it loads, when the
    rollout is built (that imports the user's file)."""
    ac, key = cfg.rollout.agent, "rollout.agent"
    if ac.entrypoint and ac.env:
        raise ConfigError(f"'{key}.entrypoint' and '{key}.env' are two ways to name the agent: set one")
    if ac.env and not ac.env.startswith(ENV_PREFIX):
        raise ConfigError(f"'{key}.env' {ac.env!r}: environments are named verifiers:<environment>")
    if ac.entrypoint and not ENTRYPOINT.fullmatch(ac.entrypoint.strip()):
        raise ConfigError(
            f"'{key}.entrypoint' {ac.entrypoint!r} must be path/to/file.py:function or package.module:function"
        )
    if cfg.rollout.multi_turn.enable:
        name = "entrypoint" if ac.entrypoint else "env"
        raise ConfigError(
            f"'{key}.{name}' and 'rollout.multi_turn.enable=true' are two agent modes: choose one"
        )
    _one_of(f"{key}.on_error", ac.on_error, ON_ERROR_MODES)
