"""defaults < recipe YAML < dotted overrides, checked against the schema, then by `check_config`.

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

from turnrl.config.checks import ConfigError, check_config
from turnrl.config.schema import Config


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
    same_leaf = [k for k in valid_keys() if k.rsplit(".", 1)[-1] == leaf]
    # ... and within it, one under the section the user named (critic.lr -> critic.optim.lr)
    section = key.split(".", 1)[0]
    close = sorted(same_leaf, key=lambda k: k.split(".", 1)[0] != section)[:1]
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
    check_config(cfg)
    return cfg


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
