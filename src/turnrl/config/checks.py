"""Every cross-field rule of the config, in one place: `check_config(cfg)`.

`load_config` runs it on what it builds and the Trainer runs it again, so a Config made in code is
checked too. It only reads the config (idempotent) and imports nothing heavy (cheap).
"""

from __future__ import annotations

from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.config.schema import Config
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
REASONING_GYM = "reasoning_gym:"
"""`data.task` prefix of a reasoning-gym dataset (`turnrl.tasks.gym.PREFIX`)."""


class ConfigError(TurnrlInputError):
    """A bad recipe or override; the message is one line naming the key and the fix."""


def check_config(cfg: Config) -> None:
    """Raise ConfigError naming the first key that breaks a rule a type system cannot express."""
    _check_sizes_and_sampling(cfg)
    _check_algorithm(cfg)
    _check_data(cfg)
    _check_distributed(cfg)
    _check_rollout_engine(cfg)
    _check_rollout_correction(cfg)
    _check_async(cfg)
    if cfg.trainer.max_checkpoints_to_keep < 0:
        raise ConfigError(
            f"'trainer.max_checkpoints_to_keep' must be >= 0 (0 = keep all), got {cfg.trainer.max_checkpoints_to_keep}"
        )
    if cfg.rollout.multi_turn.enable:
        _check_multi_turn(cfg.rollout.multi_turn)


def _check_distributed(cfg: Config) -> None:
    """Data-parallel ranks split every batch by whole prompt groups: sizes in prompts must divide."""
    t = cfg.trainer
    for key, value in (("trainer.nnodes", t.nnodes), ("trainer.n_gpus_per_node", t.n_gpus_per_node)):
        if value < 1:
            raise ConfigError(f"'{key}' must be >= 1, got {value}")
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
    if r.sync_every < 0:
        raise ConfigError(f"'rollout.sync_every' must be >= 0 (0 = by device), got {r.sync_every}")
    sv = r.server
    for key, value in (
        ("timeout_s", sv.timeout_s),
        ("startup_timeout_s", sv.startup_timeout_s),
    ):
        if value <= 0:
            raise ConfigError(f"'rollout.server.{key}' must be > 0, got {value}")
    if sv.max_retries < 0:
        raise ConfigError(f"'rollout.server.max_retries' must be >= 0, got {sv.max_retries}")
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
    if t.max_staleness < 0:
        raise ConfigError(f"'trainer.max_staleness' must be >= 0, got {t.max_staleness}")
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
    if rc.tis_cap <= 0:
        raise ConfigError(f"'{key}.tis_cap' must be > 0, got {rc.tis_cap}")
    if not 0 <= rc.mis_low < rc.mis_high:
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
    d, a, r = cfg.data, cfg.actor, cfg.rollout
    positive = {
        "data.train_batch_size": d.train_batch_size,
        "data.max_prompt_length": d.max_prompt_length,
        "data.max_response_length": d.max_response_length,
        "rollout.n": r.n,
        "actor.ppo_mini_batch_size": a.ppo_mini_batch_size,
        "actor.ppo_micro_batch_size": a.ppo_micro_batch_size,
        "actor.log_prob_micro_batch_size": a.log_prob_micro_batch_size,
        "actor.ppo_epochs": a.ppo_epochs,
        "rollout.generation_batch_size": r.generation_batch_size,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"'{key}' must be positive, got {value}")
    if d.train_batch_size % a.ppo_mini_batch_size:
        raise ConfigError(
            f"'data.train_batch_size'={d.train_batch_size} prompts does not divide into "
            f"'actor.ppo_mini_batch_size'={a.ppo_mini_batch_size} prompts; pick a divisor"
        )
    _check_token_budgets(cfg)
    if r.temperature <= 0:
        raise ConfigError(f"'rollout.temperature' must be > 0 for training rollouts, got {r.temperature}")
    if not 0 < r.top_p <= 1:
        raise ConfigError(f"'rollout.top_p' must be in (0, 1], got {r.top_p}")
    if a.clip_ratio_c <= 1:
        raise ConfigError(f"'actor.clip_ratio_c' must be > 1 (dual-clip), got {a.clip_ratio_c}")
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
    a, ref, c = cfg.actor, cfg.ref, cfg.critic
    budgets = {
        "actor.ppo_max_token_len_per_gpu": (a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu),
        "actor.log_prob_max_token_len_per_gpu": (a.use_dynamic_bsz, a.log_prob_max_token_len_per_gpu),
        "ref.log_prob_max_token_len_per_gpu": (
            ref.log_prob_use_dynamic_bsz,
            ref.log_prob_max_token_len_per_gpu,
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
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        raise ConfigError("'reward_model.enable=true' needs 'reward_model.model.path'")
    if cfg.critic.enable and cfg.data.train_batch_size % cfg.critic.ppo_mini_batch_size:
        raise ConfigError(
            f"'data.train_batch_size'={cfg.data.train_batch_size} prompts does not divide into "
            f"'critic.ppo_mini_batch_size'={cfg.critic.ppo_mini_batch_size} prompts; pick a divisor"
        )
    _one_of("reward.on_error", cfg.reward.on_error, ON_ERROR_MODES)
    if cfg.reward.timeout_s < 0:
        raise ConfigError(f"'reward.timeout_s' must be >= 0 (0 = no limit), got {cfg.reward.timeout_s}")
    ob = cfg.reward.overlong_buffer
    if ob.enable and not 0 < ob.len < cfg.data.max_response_length:
        raise ConfigError(
            f"'reward.overlong_buffer.len' must be in (0, data.max_response_length), got {ob.len}"
        )


def _check_data(cfg: Config) -> None:
    d = cfg.data
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
    """`rollout.multi_turn` with `enable=true`: checked before any tool server starts."""
    key = "rollout.multi_turn"
    if mt.format not in MULTI_TURN_FORMATS:
        raise ConfigError(f"'{key}.format' must be xml or json, got '{mt.format}'")
    at_least = {
        "max_turns": (mt.max_turns, 0),
        "max_obs_length": (mt.max_obs_length, 1),
        "max_tokens_per_turn": (mt.max_tokens_per_turn, 0),
        "max_concurrent_calls": (mt.max_concurrent_calls, 1),
        "search.topk": (mt.search.topk, 1),
    }
    for name, (value, low) in at_least.items():
        if value < low:
            raise ConfigError(f"'{key}.{name}' must be >= {low}, got {value}")
    for name, seconds in (("tool_timeout", mt.tool_timeout), ("python.run_timeout", mt.python.run_timeout)):
        if seconds <= 0:
            raise ConfigError(f"'{key}.{name}' must be > 0, got {seconds}")
    if not mt.answer_tag.strip():
        raise ConfigError(f"'{key}.answer_tag' must not be empty")
    if not mt.tools and not mt.custom_tools:
        raise ConfigError(f"{key} is enabled but names no tool ({key}.tools / custom_tools)")
