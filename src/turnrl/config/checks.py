"""Every rule of the config, in one place: `check_config(cfg)`.

The range of every numeric setting, in every schema (`turnrl train` / `eval` / `trace`, `turnrl sft`
/ `rm`), is declared on its field (`rules.ranged`) and checked by `check_ranges`; the cross-field
rules follow it.
`load_config` runs the checks on what it builds and the Trainer runs them again, so a Config made in
code is checked too. They only read the config (idempotent) and import nothing heavy (cheap).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from turnrl.config.agent_checks import (  # noqa: F401  (their readers import them from here too)
    ENV_KINDS,
    ON_ERROR_MODES,
    TOOL_CALL_FORMATS,
    check_function_agent,
    check_multi_turn,
)
from turnrl.config.config_error import ConfigError
from turnrl.config.config_error import one_of as _one_of
from turnrl.config.ranges import (  # noqa: F401  (the ranges' readers, imported from here too)
    DEFAULT_RULE,
    accepts,
    numeric_settings,
    rule_of,
)
from turnrl.config.rules import Rule  # noqa: F401
from turnrl.config.schema import (
    ActorConfig,
    Config,
    JudgeConfig,
    OptimConfig,
)

if TYPE_CHECKING:  # the tables import torch: read only when the algorithm is checked
    from turnrl.algorithms.advantages import EstimatorSpec
    from turnrl.algorithms.losses import PolicyLoss

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")
DTYPES = ("auto", "float32", "bfloat16", "float16")  # model.dtype; rollout.dtype takes all but auto
COMPILE_MODES = ("auto", "true", "false")  # rollout.compile (a YAML true arrives as "True")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")  # model.compute_dtype (turnrl.models.precision)
ENGINES = ("hf", "server", "vllm")
"""`reward.on_error`: what a failing reward function does (the reward scorer reads it)."""
SAMPLERS = ("plain", "curriculum")
"""`data.sampler`: the training prompts' order (`turnrl.data.curriculum.make_loader`)."""
REFILLS = ("fresh", "same")
"""`algorithm.filter_groups.refill`: what dynamic sampling's extra rounds sample (`trainer.sampling`)."""


def check_ranges(cfg: Any) -> None:
    """Raise ConfigError naming the first numeric setting outside its declared rule, or NaN/inf:
    `'trainer.total_training_steps' must be >= 0 (0 = run trainer.total_epochs), got -1`."""
    for key, value, (spec, note) in numeric_settings(cfg):
        finite = math.isfinite(value)
        if finite and accepts(spec)(value):
            continue
        want = spec if finite or spec == "finite" else f"finite and {spec}"
        why = f" ({note})" if note else ""
        raise ConfigError(f"'{key}' must be {want}{why}, got {value}")
    for key, value in _settings(cfg):  # the rules on a setting's shape, not on its numbers
        if isinstance(value, OptimConfig) and len(value.betas) != 2:  # each beta is ranged above
            raise ConfigError(f"'{key}.betas' must hold two values (beta1, beta2), got {len(value.betas)}")
        if key.split(".")[-1] == "path" and isinstance(value, str):
            check_path_length(key, value)
            if key == "model.path" and not value.strip():  # the others' empty value means "none"
                raise ConfigError(
                    "'model.path' is empty: name the model (a Hugging Face directory or Hub id, a turnrl run, "
                    "a .gguf file, or smollm2-135m-instruct, the default)"
                )


NAME_MAX = 255
"""Bytes in one file or directory name (Linux, macOS): a longer one makes every file-system call on
the path raise ENAMETOOLONG, which would otherwise surface as a traceback from wherever it is first read."""


def check_path_length(key: str, path: str) -> None:
    """Raise ConfigError when a name in `path` is longer than the file system allows."""
    for part in path.split("/"):
        if len(part.encode()) > NAME_MAX:
            raise ConfigError(
                f"'{key}': a name in the path is {len(part.encode())} bytes long, more than a file system "
                f"allows ({NAME_MAX}): '{part[:40]}...'"
            )


def _settings(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every setting and section of a config tree by dotted key, sections before their settings,
    skipping sections whose `enable` is false (as the ranges do)."""
    if getattr(node, "enable", True) is False:
        return
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        yield prefix + f.name, value
        if dataclasses.is_dataclass(value):
            yield from _settings(value, f"{prefix}{f.name}.")


def check_config(cfg: Config) -> None:
    """Raise ConfigError naming the first key that breaks a rule a type system cannot express."""
    check_ranges(cfg)  # first: the cross-field rules below divide by sizes and compare lengths
    t = cfg.trainer
    if t.total_training_steps == 0 and t.total_epochs == 0:
        raise ConfigError("'trainer.total_epochs'=0 with trainer.total_training_steps=0 trains nothing")
    for key, optim in (("actor.optim", cfg.actor.optim), ("critic.optim", cfg.critic.optim)):
        if optim.lr_decay != "constant":  # how many optimizer steps a run makes depends on its episodes
            raise ConfigError(
                f"'{key}.lr_decay'={optim.lr_decay!r}: an RL run keeps a constant rate after its warm-up "
                "(decay is for turnrl sft and turnrl rm); drop the key"
            )
    _check_sizes_and_sampling(cfg)
    _check_algorithm(cfg)
    _check_data(cfg)
    _check_distributed(cfg)
    _check_rollout_engine(cfg)
    _check_rollout_correction(cfg)
    _check_async(cfg)
    if cfg.rollout.multi_turn.enable:
        check_multi_turn(cfg.rollout.multi_turn)
    ac = cfg.rollout.agent
    if ac.entrypoint or ac.env or ac.command or ac.test_command:
        check_function_agent(cfg)


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
    if str(r.compile).lower() not in COMPILE_MODES:
        raise ConfigError(f"'rollout.compile' must be auto, true or false, got '{r.compile}'")
    if r.dtype not in ("", *DTYPES[1:]):
        raise ConfigError(
            f"unknown 'rollout.dtype' '{r.dtype}'; valid: {', '.join(DTYPES[1:])} (empty: model.dtype)"
        )
    if r.dtype and r.engine == "vllm":
        raise ConfigError(
            "'rollout.dtype' is for the hf and server engines; vLLM loads the model in 'model.dtype'"
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
    updates = updates_per_step(cfg)
    if 0 < t.max_staleness < updates:
        raise ConfigError(
            f"'trainer.max_staleness={t.max_staleness}' counts optimizer updates, and one step makes "
            f"{updates} (actor.ppo_epochs={cfg.actor.ppo_epochs} x data.train_batch_size="
            f"{cfg.data.train_batch_size} / actor.ppo_mini_batch_size={cfg.actor.ppo_mini_batch_size}): "
            f"a batch one step old is {updates} updates old; set it to 0 (no overlap) or >= {updates}"
        )
    from turnrl.algorithms.rollout_corr import bypass_choice

    if bypass_choice(cfg.algorithm.rollout_correction.bypass) == "true" and t.max_staleness > 0:
        raise ConfigError(
            "'algorithm.rollout_correction.bypass=true' is exact only on-policy; async samples may be "
            f"{t.max_staleness} optimizer updates old: use mode=tis or mis instead"
        )


def updates_per_step(cfg: Config) -> int:
    """Actor optimizer updates one training step makes: `ppo_epochs` passes over
    `train_batch_size / ppo_mini_batch_size` mini-batches (the policy moves once per update, so
    staleness is counted in them). Worked example: 8 prompts, mini-batches of 4, 2 epochs: 4."""
    a = cfg.actor
    return a.ppo_epochs * max(1, -(-cfg.data.train_batch_size // max(1, a.ppo_mini_batch_size)))


def staleness_lead(cfg: Config) -> int:
    """How many steps the async producer may run ahead: `trainer.max_staleness` optimizer updates,
    in whole steps (0 in sync mode). A batch sampled that many steps ahead is trained at most
    `max_staleness` updates after the policy that sampled it."""
    t = cfg.trainer
    return t.max_staleness // updates_per_step(cfg) if t.mode == "async" else 0


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
    if not rc.mis_low < rc.mis_high:  # each one's range is on its field
        raise ConfigError(f"'{key}' needs 0 <= mis_low < mis_high, got [{rc.mis_low}, {rc.mis_high}]")
    bypass = bypass_choice(rc.bypass)
    _one_of(f"{key}.bypass", bypass, BYPASS_CHOICES)
    if bypass == "true" and rc.mode != "none":
        raise ConfigError(
            f"'{key}.bypass=true' uses the rollout's log-probs as the old ones, so there is no "
            f"gap to correct: set {key}.mode=none"
        )


def _check_sizes_and_sampling(cfg: Config) -> None:
    d, a = cfg.data, cfg.actor  # every size is >= 1 (declared on the fields)
    if d.train_batch_size % a.ppo_mini_batch_size:
        raise ConfigError(
            f"'data.train_batch_size'={d.train_batch_size} prompts does not divide into "
            f"'actor.ppo_mini_batch_size'={a.ppo_mini_batch_size} prompts; pick a divisor"
        )
    if d.gen_batch_size and d.gen_batch_size != d.train_batch_size:
        if not cfg.algorithm.filter_groups.enable:
            raise ConfigError(
                f"'data.gen_batch_size'={d.gen_batch_size} samples more prompts than a step trains on "
                "only with dynamic sampling: set algorithm.filter_groups.enable=true or drop the key"
            )
        if d.gen_batch_size < d.train_batch_size:
            raise ConfigError(
                f"'data.gen_batch_size'={d.gen_batch_size} is below data.train_batch_size="
                f"{d.train_batch_size}: a round samples at least the prompts a step trains on"
            )
    _check_token_budgets(cfg)
    if cfg.model.dtype not in DTYPES:
        raise ConfigError(
            f"'model.dtype' must be auto, float32, bfloat16 or float16, got '{cfg.model.dtype}'"
        )
    if cfg.model.compute_dtype not in COMPUTE_DTYPES:
        raise ConfigError(
            f"'model.compute_dtype' must be one of {', '.join(COMPUTE_DTYPES)}, got '{cfg.model.compute_dtype}'"
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
    """The estimator, the losses and KL by name, then the models and reward settings they need."""
    # the valid names live beside the code that uses them (and import torch): imported on first check,
    # all of them before an estimator or a loss of one's own is imported by its path
    from turnrl.algorithms.advantages import ADV_ESTIMATORS, resolve_estimator
    from turnrl.algorithms.core import LOSS_AGG_MODES
    from turnrl.algorithms.kl import KL_CONTROLLERS, KL_ESTIMATORS
    from turnrl.algorithms.losses import POLICY_LOSS_MODES, resolve_policy_loss

    alg, actor, n = cfg.algorithm, cfg.actor, cfg.rollout.n
    est = alg.adv_estimator
    estimator = _resolve("algorithm.adv_estimator", est, ADV_ESTIMATORS, resolve_estimator, alg)
    if estimator.spec.needs_groups and n < 2:  # group baselines
        raise ConfigError(f"'{est}' needs 'rollout.n' >= 2 (a group of one has no baseline), got {n}")
    _one_of("actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    _one_of("critic.loss_agg_mode", cfg.critic.loss_agg_mode, LOSS_AGG_MODES)
    mode = actor.policy_loss_mode
    _check_clip_bounds(
        actor, _resolve("actor.policy_loss_mode", mode, POLICY_LOSS_MODES, resolve_policy_loss, actor)
    )
    _one_of("algorithm.kl_penalty", alg.kl_penalty, KL_ESTIMATORS)
    _one_of("actor.kl_loss_type", actor.kl_loss_type, KL_ESTIMATORS)
    _one_of("algorithm.kl_ctrl.type", alg.kl_ctrl.type, KL_CONTROLLERS)
    _one_of("algorithm.filter_groups.refill", alg.filter_groups.refill, REFILLS)
    _check_needed_models(cfg, estimator.spec)
    _check_turn_credit(cfg, est, estimator.spec)
    _check_reward(cfg)


def _check_turn_credit(cfg: Config, est: str, estimator: EstimatorSpec) -> None:
    """Step rewards and credit per turn need turnrl's own multi-turn loop, and step rewards an
    estimator that reads them (its row says): recording what nothing reads is refused, not ignored."""
    from turnrl.algorithms.advantages import ESTIMATORS

    mt, key = cfg.rollout.multi_turn, "rollout.multi_turn.step_rewards"
    if mt.step_rewards and not mt.enable:
        raise ConfigError(
            f"'{key}=true' rewards the tool calls of multi-turn episodes, and this run is single-turn: "
            "set rollout.multi_turn.enable=true or drop step_rewards"
        )
    if mt.step_rewards and not estimator.reads_turn_rewards:
        readers = " or ".join(n for n, s in ESTIMATORS.items() if s.reads_turn_rewards)
        raise ConfigError(
            f"'{key}=true' but 'algorithm.adv_estimator={est}' does not read step rewards: "
            f"set it to {readers}, or drop step_rewards"
        )
    if estimator.multi_turn and not mt.enable:
        raise ConfigError(
            f"'algorithm.adv_estimator={est}' credits the turns of multi-turn episodes, and this run is "
            "single-turn: set rollout.multi_turn.enable=true"
        )


def _resolve(
    key: str, name: str, known: tuple[str, ...], resolve: Callable[[str, Any, str], Any], owner: Any
) -> Any:
    """The table row `name` names, with its parameters read from `owner`: one of `known`, or a
    `module:function` path that `resolve` imports and checks (now, before any model loads)."""
    if ":" not in name:
        _one_of(key, name, known)
    try:
        return resolve(name, owner, key)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_clip_bounds(actor: ActorConfig, loss: PolicyLoss) -> None:
    """The policy loss's clip bounds must leave some token or ratio inside them; its row says which
    of its parameters must not cross and which `actor.clip_ratio_low` it takes."""
    keys = dict(loss.spec.keys)
    for low_field, high_field, why in loss.spec.ordered:
        lb, ub = getattr(loss.params, low_field), getattr(loss.params, high_field)
        if lb > ub:
            lb_key, ub_key = keys[low_field], keys[high_field]
            raise ConfigError(
                f"'actor.{lb_key}'={lb} is above 'actor.{ub_key}'={ub}: {why}; lower {lb_key} or raise {ub_key}"
            )
    if not loss.spec.takes_low(actor.clip_ratio_low):  # its lowest, 0, is on the field's range
        _, highest, inclusive = loss.spec.low
        raise ConfigError(
            f"'actor.clip_ratio_low'={actor.clip_ratio_low} leaves no ratio above the lower bound "
            f"1 - clip_ratio_low; it must be {'<=' if inclusive else '<'} {highest:g} ({_wider_lows()})"
        )


def _wider_lows() -> str:
    """The policy losses that take another `actor.clip_ratio_low` than PPO's, in their rows' words:
    `1 only for cispo: no lower bound; gmpo reads it in log space`."""
    from turnrl.algorithms.policy_losses import POLICY_LOSSES

    return "; ".join(
        f"{spec.low[1]:g} only for {name}: {spec.low_note}"
        if spec.low[1] < math.inf
        else f"{name} {spec.low_note}"
        for name, spec in POLICY_LOSSES.items()
        if spec.low_note
    )


def _check_needed_models(cfg: Config, estimator: EstimatorSpec) -> None:
    """What the algorithm reads must be loaded: the critic, the reference, the teacher, the reward model."""
    alg, actor = cfg.algorithm, cfg.actor
    if estimator.needs_critic and not cfg.critic.enable:
        raise ConfigError(
            f"'algorithm.adv_estimator={alg.adv_estimator}' needs a critic: set critic.enable=true"
        )
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
    _check_distillation(cfg, estimator)
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        raise ConfigError("'reward_model.enable=true' needs 'reward_model.model.path'")
    if cfg.critic.enable and cfg.data.train_batch_size % cfg.critic.ppo_mini_batch_size:
        raise ConfigError(
            f"'data.train_batch_size'={cfg.data.train_batch_size} prompts does not divide into "
            f"'critic.ppo_mini_batch_size'={cfg.critic.ppo_mini_batch_size} prompts; pick a divisor"
        )


def _check_reward(cfg: Config) -> None:
    """The reward's failure mode, its judge, and the overlong buffer's length."""
    _one_of("reward.on_error", cfg.reward.on_error, ON_ERROR_MODES)
    if cfg.reward.judge.enable:
        _check_judge(cfg.reward.judge)
    ob = cfg.reward.overlong_buffer
    if ob.enable and not 0 < ob.len < cfg.data.max_response_length:
        raise ConfigError(
            f"'reward.overlong_buffer.len' must be in (0, data.max_response_length), got {ob.len}"
        )


def _check_distillation(cfg: Config, estimator: EstimatorSpec) -> None:
    """On-policy distillation needs a teacher, and a teacher needs a use: loading a model nothing
    reads costs memory and a forward pass per step, so it is refused rather than ignored."""
    from turnrl.algorithms.advantages import ESTIMATORS

    alg, teacher = cfg.algorithm, cfg.teacher.model.path
    own, est = estimator.distills, f"algorithm.adv_estimator={alg.adv_estimator}"
    if own and alg.distill_coef > 0:
        raise ConfigError(
            f"'algorithm.distill_coef'={alg.distill_coef} adds the distillation term to another estimator's "
            f"advantages; with {est} it is the advantage already: set distill_coef=0"
        )
    if not teacher and (own or alg.distill_coef > 0):
        use = est if own else f"algorithm.distill_coef={alg.distill_coef}"
        raise ConfigError(
            f"'{use}' distills from a teacher: set teacher.model.path (a model with the policy's tokenizer)"
        )
    if teacher and not own and alg.distill_coef == 0:
        users = " or ".join(f"algorithm.adv_estimator={n}" for n, s in ESTIMATORS.items() if s.distills)
        raise ConfigError(
            f"'teacher.model.path'={teacher} is set but nothing uses the teacher: set {users} "
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
    # `data.task` is checked against the tasks' table where the run is assembled
    # (`trainer.setup.check_plugins`): the config knows no task
