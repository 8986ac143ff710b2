"""defaults < recipe YAML < dotted overrides, checked against the schema.

OmegaConf does the merging and the type coercion; we walk the keys ourselves first so an
unknown key fails with the closest valid name instead of a stack trace.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from turnrl.config.schema import Config

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")


class ConfigError(ValueError):
    """A bad recipe or override; the message is one line naming the key and the fix."""


def _schema_keys(cls: type, prefix: str = "") -> dict[str, type]:
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        ftype = f.type if isinstance(f.type, type) else None
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out[key] = type(default)
            out.update(_schema_keys(type(default), key + "."))
        else:
            out[key] = ftype or object
    return out


@cache
def valid_keys() -> tuple[str, ...]:
    return tuple(_schema_keys(Config))


def _suggest(key: str) -> str:
    leaf = key.rsplit(".", 1)[-1]
    # a right name under the wrong section is the likeliest mistake, then a typo
    close = [k for k in valid_keys() if k.rsplit(".", 1)[-1] == leaf][:1]
    close = close or difflib.get_close_matches(key, valid_keys(), n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


def _check_keys(tree: Any, source: str, prefix: str = "") -> None:
    if not isinstance(tree, dict):
        return
    keys = valid_keys()
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if key not in keys:
            raise ConfigError(f"unknown config key '{key}' in {source}{_suggest(key)}")
        if isinstance(v, dict):
            _check_keys(v, source, key + ".")


def _parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override '{item}' is not of the form key=value (e.g. rollout.n=4)")
    key, raw = item.split("=", 1)
    key = key.strip().lstrip("+")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def load_config(recipe: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Build a checked Config from an optional YAML recipe and `a.b=value` overrides."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if recipe:
        path = Path(recipe)
        if not path.is_file():
            raise ConfigError(f"recipe file not found: {path}")
        try:
            tree = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"recipe {path} is not valid YAML: {str(err).splitlines()[0]}") from None
        if not isinstance(tree, dict):
            raise ConfigError(f"recipe {path} must be a mapping of sections, got {type(tree).__name__}")
        layers.append((str(path), tree))
    for item in overrides or []:
        key, value = _parse_override(item)
        layers.append((f"override '{item}'", _nest(key, value)))

    merged = OmegaConf.structured(Config)
    for source, tree in layers:
        _check_keys(tree, source)
        try:
            merged = OmegaConf.merge(merged, tree)
        except OmegaConfBaseException as err:
            key = getattr(err, "full_key", None) or "?"
            msg = str(err).splitlines()[0]
            raise ConfigError(f"bad value for '{key}' in {source}: {msg}") from None
    cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Cross-field checks that a type system cannot express."""
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
    if r.temperature <= 0:
        raise ConfigError(f"'rollout.temperature' must be > 0 for training rollouts, got {r.temperature}")
    if not 0 < r.top_p <= 1:
        raise ConfigError(f"'rollout.top_p' must be in (0, 1], got {r.top_p}")
    if a.clip_ratio_c <= 1:
        raise ConfigError(f"'actor.clip_ratio_c' must be > 1 (dual-clip), got {a.clip_ratio_c}")
    if cfg.model.dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise ConfigError(
            f"'model.dtype' must be auto, float32, bfloat16 or float16, got '{cfg.model.dtype}'"
        )
    from turnrl.algorithms.advantages import ADV_ESTIMATORS

    est = cfg.algorithm.adv_estimator
    if est not in ADV_ESTIMATORS:
        raise ConfigError(f"unknown 'algorithm.adv_estimator' '{est}'; valid: {', '.join(ADV_ESTIMATORS)}")
    if est in ("grpo", "rloo", "reinforce_plus_plus_baseline") and r.n < 2:
        raise ConfigError(f"'{est}' needs 'rollout.n' >= 2 (a group of one has no baseline), got {r.n}")
    _validate_algorithm(cfg)
    bad_loggers = set(cfg.trainer.logger) - set(LOGGERS)
    if bad_loggers:
        raise ConfigError(f"unknown 'trainer.logger' {sorted(bad_loggers)}; valid: {', '.join(LOGGERS)}")


def _one_of(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown '{key}' '{value}'; valid: {', '.join(valid)}")


def _validate_algorithm(cfg: Config) -> None:
    from turnrl.algorithms.core import LOSS_AGG_MODES
    from turnrl.algorithms.kl import KL_CONTROLLERS, KL_ESTIMATORS
    from turnrl.algorithms.losses import POLICY_LOSS_MODES

    alg, actor = cfg.algorithm, cfg.actor
    _one_of("actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    _one_of("critic.loss_agg_mode", cfg.critic.loss_agg_mode, LOSS_AGG_MODES)
    _one_of("actor.policy_loss_mode", actor.policy_loss_mode, POLICY_LOSS_MODES)
    _one_of("algorithm.kl_penalty", alg.kl_penalty, KL_ESTIMATORS)
    _one_of("actor.kl_loss_type", actor.kl_loss_type, KL_ESTIMATORS)
    _one_of("algorithm.kl_ctrl.type", alg.kl_ctrl.type, KL_CONTROLLERS)
    if alg.adv_estimator == "gae" and not cfg.critic.enable:
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
    ob = cfg.reward.overlong_buffer
    if ob.enable and not 0 < ob.len < cfg.data.max_response_length:
        raise ConfigError(
            f"'reward.overlong_buffer.len' must be in (0, data.max_response_length), got {ob.len}"
        )


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


@cache
def field_docs() -> dict[str, str]:
    """`section.key` -> the docstring written under the field in schema.py."""
    from turnrl.config import agent_schema, schema

    nodes = [n for mod in (schema, agent_schema) for n in ast.parse(inspect.getsource(mod)).body]
    per_class: dict[str, dict[str, str]] = {}
    for node in nodes:
        if isinstance(node, ast.ClassDef):
            docs: dict[str, str] = {}
            body = node.body
            for stmt, nxt in itertools.pairwise(body):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)
                ):
                    docs[stmt.target.id] = nxt.value.value.strip()
            per_class[node.name] = docs
    out: dict[str, str] = {}
    for key, cls in _schema_keys(Config).items():
        parent = Config
        parts = key.split(".")
        for part in parts[:-1]:
            parent = _schema_keys(parent)[part]
        out[key] = per_class.get(parent.__name__, {}).get(parts[-1], "")
        del cls
    return out
