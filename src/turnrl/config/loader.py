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
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from turnrl.config.checks import ConfigError, check_config
from turnrl.config.schema import Config

T = TypeVar("T")


def _schema_keys(cls: type, prefix: str = "") -> dict[str, type]:
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        ftype = f.type if isinstance(f.type, type) else None
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out[key] = type(default)
            out.update(_schema_keys(type(default), key + "."))
        elif isinstance(default, dict):
            out[key] = dict  # free-form (`data.task_args`): its own keys are checked by their reader
        else:
            out[key] = ftype or object
    return out


@cache
def _schema_keys_of(schema: type = Config) -> dict[str, type]:
    return _schema_keys(schema)


@cache
def valid_keys(schema: type = Config) -> tuple[str, ...]:
    return tuple(_schema_keys_of(schema))


# leaf names verl and TRL users type for keys turnrl spells differently
LEAF_ALIASES = {"learning_rate": "lr", "warmup_steps": "lr_warmup_steps", "max_grad_norm": "grad_clip"}


def _suggest(key: str, schema: type = Config) -> str:
    leaf = key.rsplit(".", 1)[-1]
    # verl's `*_micro_batch_size_per_gpu`: ours already count the responses of one pass on one rank
    leaf = LEAF_ALIASES.get(leaf, leaf.removesuffix("_per_gpu"))
    # a right name under the wrong section is the likeliest mistake, then a typo
    same_leaf = [k for k in valid_keys(schema) if k.rsplit(".", 1)[-1] == leaf]
    # ... and within it, one under the section the user named (critic.lr -> critic.optim.lr)
    section = key.split(".", 1)[0]
    close = sorted(same_leaf, key=lambda k: k.split(".", 1)[0] != section)[:1]
    close = close or difflib.get_close_matches(key, valid_keys(schema), n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


def _check_keys(tree: Any, source: str, prefix: str = "", schema: type = Config) -> None:
    if not isinstance(tree, dict):
        return
    keys = valid_keys(schema)
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if key not in keys:
            raise ConfigError(f"unknown config key '{key}' in {source}{_suggest(key, schema)}")
        if isinstance(v, dict) and _schema_keys_of(schema)[key] is not dict:
            _check_keys(v, source, key + ".", schema)


def _parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override '{item}' is not of the form key=value (e.g. rollout.n=4)")
    key, raw = item.split("=", 1)
    key = key.strip().lstrip("+")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, dict) and not raw.lstrip().startswith("{"):
        value = raw  # `path.py:` or `a: b` reads as a YAML mapping; only `{k: v}` is meant as one
    return key, value


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
RECIPE_FOLDERS = {"train": RECIPES_DIR, "sft": RECIPES_DIR / "sft"}
"""Where each command's shipped recipes live: `turnrl train NAME` reads `recipes/NAME.yaml`, `turnrl
sft NAME` reads `recipes/sft/NAME.yaml`. Apart, so neither command lists or loads the other's (an SFT
recipe's keys are not a training run's)."""


def builtin_recipes(command: str = "train") -> dict[str, Path]:
    """The recipes shipped inside the package for `command` (`turnrl train grpo`, `turnrl sft
    search_sft`), by name; none for a command without a folder (`rm`)."""
    folder = RECIPE_FOLDERS.get(command)
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder else {}


def builtin_sft_recipes() -> dict[str, Path]:
    """The recipes `turnrl sft NAME` resolves, by name."""
    return builtin_recipes("sft")


def recipe_summary(path: Path) -> str:
    """A recipe's first comment line: what it trains."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break  # the header is the comment block up to its first blank line
        words += line.strip("# ").split()
    text = " ".join(words)
    return text.split(". ", 1)[0].split(": ", 1)[0].rstrip(".")


def recipe_listing(command: str = "train") -> list[str]:
    """`turnrl train --list-recipes` (and `sft`): one line per shipped recipe, its name and summary."""
    return [f"{name:20s} {recipe_summary(path)}" for name, path in builtin_recipes(command).items()]


def resolve_recipe(recipe: str | Path, command: str = "train") -> Path:
    """A recipe file, or the name of one `command` ships (`grpo`, `calculator_agent`, ...; for
    `sft`, `search_sft`): a bare name that is not a file in the working directory."""
    path = Path(recipe)
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    shipped = builtin_recipes(command)
    if str(recipe) in shipped:
        return shipped[str(recipe)]
    raise ConfigError(_unknown_recipe(str(recipe), command, shipped))


def _unknown_recipe(name: str, command: str, shipped: dict[str, Path]) -> str:
    """One line: the name is another command's recipe, or the closest of `command`'s, and its list."""
    listed = ", ".join(shipped) or "none"
    for other in RECIPE_FOLDERS:
        if other != command and name in builtin_recipes(other):
            return f"'{name}' is a `turnrl {other}` recipe, not a `turnrl {command}` one; built-in: {listed}"
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"no recipe file '{name}' and no built-in recipe of that name; {hint}built-in: {listed}"


def read_recipe(path: Path) -> dict[str, Any]:
    """The recipe's sections; a file that is missing, not UTF-8, not YAML or not a mapping is one line."""
    if path.is_dir():
        raise ConfigError(f"recipe {path} is a directory; give a .yaml file")
    if not path.is_file():
        raise ConfigError(f"recipe file not found: {path}")
    try:
        tree = yaml.safe_load(path.read_bytes().decode("utf-8")) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"recipe {path} is not UTF-8 text (byte offset {err.start}); is it a YAML file?"
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"recipe {path} is not valid YAML: {_yaml_problem(err)}") from None
    if not isinstance(tree, dict):
        raise ConfigError(
            f"recipe {path} must be a mapping of sections (data:, actor:, ...), got a YAML {type(tree).__name__}"
        )
    return tree


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's reason and where (1-based line and column), on one line."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def load_config(
    recipe: str | Path | None = None,
    overrides: list[str] | None = None,
    schema: type[T] = Config,  # type: ignore[assignment]
    check: Callable[[Any], None] | None = check_config,
    command: str = "train",
) -> T:
    """Build a checked config from an optional YAML recipe and `a.b=value` overrides: a `Config`
    for `turnrl train`, or another schema (SFT, reward-model training) with its own `check`.
    A bare recipe name is one of `command`'s shipped recipes."""
    layers: list[tuple[str, dict[str, Any], str]] = []  # (where, settings, an override's dotted key)
    if recipe:
        path = resolve_recipe(recipe, command)
        layers.append((str(path), read_recipe(path), "?"))
    for item in overrides or []:
        key, value = _parse_override(item)
        layers.append((f"override '{item}'", _nest(key, value), key))
    if recipe:
        _drop_task_args_of_a_replaced_task(layers[0][1], [tree for _, tree, _ in layers[1:]])

    merged = OmegaConf.structured(schema)
    for source, tree, dotted in layers:
        _check_keys(tree, source, schema=schema)
        try:
            merged = OmegaConf.merge(merged, tree)
        except OmegaConfBaseException as err:
            # a section given a value (`eval=5`, `actor.optim=5`) has no full key: the override's is it
            key = getattr(err, "full_key", None) or dotted
            msg = str(err).splitlines()[0]
            if "is not a subclass of" in msg:  # OmegaConf's words for a value where a section is
                msg = f"'{key}' is a section of settings, not one value; set its keys ({key}.NAME=VALUE; --list-keys lists them)"  # fmt: skip
            raise ConfigError(f"bad value for '{key}' in {source}: {msg}") from None
    cfg: T = OmegaConf.to_object(merged)  # type: ignore[assignment]
    if check is not None:
        check(cfg)
    return cfg


def _drop_task_args_of_a_replaced_task(recipe: dict[str, Any], overrides: list[dict[str, Any]]) -> None:
    """A recipe's `data.task_args` belong to the recipe's `data.task`: when an override names
    another task they are dropped (the new task would refuse them, and a command line cannot unset
    a key), and only the `data.task_args.*` given as overrides apply, in whatever order."""
    data = recipe.get("data")
    if not isinstance(data, dict) or "task_args" not in data:
        return
    tasks = [o["data"]["task"] for o in overrides if isinstance(o.get("data"), dict) and "task" in o["data"]]
    if tasks and tasks[-1] != data.get("task"):
        recipe["data"] = {k: v for k, v in data.items() if k != "task_args"}


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


@cache
def field_docstrings(node: ast.ClassDef) -> dict[str, str]:
    """field name -> the docstring written under it, in a dataclass's syntax tree."""
    docs: dict[str, str] = {}
    for stmt, nxt in itertools.pairwise(node.body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = nxt.value.value.strip()
    return docs


def field_docs(root: type = Config) -> dict[str, str]:
    """`section.key` -> the docstring written under the field in the schema modules."""
    from turnrl.config import agent_schema, live_schema, rollout_schema, schema, supervised_schema

    modules = (schema, rollout_schema, agent_schema, supervised_schema, live_schema)
    nodes = [n for mod in modules for n in ast.parse(inspect.getsource(mod)).body]
    per_class = {node.name: field_docstrings(node) for node in nodes if isinstance(node, ast.ClassDef)}
    out: dict[str, str] = {}
    for key, cls in _schema_keys(root).items():
        parent = root
        parts = key.split(".")
        for part in parts[:-1]:
            parent = _schema_keys(parent)[part]
        # a field declared in a base class has its docstring there
        docs = (per_class.get(c.__name__, {}).get(parts[-1]) for c in parent.__mro__)
        out[key] = next((d for d in docs if d), "")
        del cls
    return out


def key_listing(root: type = Config) -> list[str]:
    """`turnrl train --list-keys` (and `sft`/`rm`): one line per key, its range where it declares
    one (`rules.ranged`: the spec, then what its sentinel means), then its docstring."""
    from turnrl.config.ranges import rule_of

    lines = []
    for key, doc in field_docs(root).items():
        parent = root
        parts = key.split(".")
        for part in parts[:-1]:
            parent = _schema_keys(parent)[part]
        rule = rule_of(parent, parts[-1]) if dataclasses.is_dataclass(parent) else None
        shown = f"[{rule.spec}{'; ' + rule.note if rule.note else ''}]" if rule else ""
        lines.append(f"{key:40s} {shown + ' ' if shown else ''}{doc}")
    return lines
