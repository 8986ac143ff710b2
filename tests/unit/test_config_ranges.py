"""The range of every numeric setting (declared on its field: `turnrl.config.rules.ranged`): decided
for every field of every schema, refusing NaN and infinities, and reported in one line naming the key."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterator
from typing import Any

import pytest

from turnrl.config import ConfigError, check_config, load_config
from turnrl.config.checks import check_ranges
from turnrl.config.loader import builtin_recipes
from turnrl.config.ranges import accepts, rule_of
from turnrl.config.rules import RANGE
from turnrl.config.schema import Config
from turnrl.config.supervised_schema import RMConfig, SFTConfig
from turnrl.supervised.checks import check_rm, check_sft

SCHEMAS = (Config, SFTConfig, RMConfig)
NUMERIC = (int, float, list[int], list[float])

# The only fields that may take a negative value, each for its documented reason. A new field that
# should join them is a decision to write down here and on its field, not a default.
MAY_BE_NEGATIVE = {
    "ActorConfig.entropy_coeff",  # negative: an entropy penalty
    "CurriculumConfig.pass_threshold",  # reward scores may be negative
    "EvalConfig.success_threshold",  # reward scores may be negative
    "PythonToolConfig.memory_limit_mb",  # -1 = the server's default
}


def numeric_fields(schema: type) -> Iterator[tuple[type, str]]:
    """(class, field) for every int, float or list-of-numbers field under `schema`, by type hint."""
    seen: set[type] = set()
    todo = [schema]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if dataclasses.is_dataclass(hint):
                todo.append(hint)
            elif hint in NUMERIC:
                yield cls, f.name


def all_numeric_fields() -> list[tuple[type, str]]:
    return sorted({pair for s in SCHEMAS for pair in numeric_fields(s)}, key=lambda p: (p[0].__name__, p[1]))


def test_every_numeric_field_has_a_decided_rule():
    """Add a numeric field to a schema and this fails until its `ranged(...)` says what values it
    takes (its docstring's sentinels: `0 = off`, `-1 = default`, ...)."""
    missing = [f"{cls.__name__}.{name}" for cls, name in all_numeric_fields() if rule_of(cls, name) is None]
    assert missing == [], f"declare a range (rules.ranged) on: {', '.join(missing)}"


def test_only_the_listed_fields_may_be_negative():
    negative = {
        f"{cls.__name__}.{name}"
        for cls, name in all_numeric_fields()
        if accepts(rule_of(cls, name).spec)(-1)  # type: ignore[union-attr]
    }
    assert negative == MAY_BE_NEGATIVE


def declared() -> Iterator[tuple[type, dataclasses.Field]]:
    """Every field of every schema that declares a range."""
    seen: set[type] = set()
    todo: list[type] = list(SCHEMAS)
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                todo.append(hints[f.name])
            elif RANGE in f.metadata:
                yield cls, f


def test_ranges_are_declared_only_on_numeric_fields():
    for cls, f in declared():
        hint = typing.get_type_hints(cls)[f.name]
        assert hint in NUMERIC, f"{cls.__name__}.{f.name} declares a range but is not a number"


def test_every_rule_is_readable():
    for _, f in declared():
        accepts(f.metadata[RANGE].spec)(0.5)  # raises on a spec it cannot read
    with pytest.raises(ValueError, match="unreadable range rule"):
        accepts("at least 3")


@pytest.mark.parametrize(
    ("spec", "accepted", "refused"),
    [
        (">= 0", [0, 3, 0.5], [-1, -0.1]),
        ("> 0", [1e-9, 2], [0, -1]),
        ("> 1", [1.01], [1, 0]),
        ("in (0, 1]", [1, 0.5], [0, 1.01]),
        ("in [0, 1)", [0, 0.999], [1, -0.01]),
        (">= 1 or -1", [-1, 1, 512], [0, -2]),
        ("finite", [-5, 0, 7], []),
    ],
)
def test_rule_specs(spec, accepted, refused):
    assert all(accepts(spec)(v) for v in accepted)
    assert not any(accepts(spec)(v) for v in refused)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_defaults_pass(schema):
    check_ranges(schema())


@pytest.mark.parametrize("name", list(builtin_recipes()))
def test_every_built_in_recipe_passes(name):
    load_config(builtin_recipes()[name])


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "trainer.total_training_steps=-1",
            "'trainer.total_training_steps' must be >= 0 (0 = run trainer.total_epochs), got -1",
        ),
        ("actor.optim.lr=-1e-5", "'actor.optim.lr' must be > 0, got -1e-05"),
        ("actor.optim.lr=nan", "'actor.optim.lr' must be finite and > 0, got nan"),
        ("rollout.temperature=.inf", "'rollout.temperature' must be finite and > 0, got inf"),
        ("actor.entropy_coeff=-inf", "'actor.entropy_coeff' must be finite, got -inf"),
        ("actor.optim.betas=[0.9,1.0]", "'actor.optim.betas[1]' must be in [0, 1), got 1.0"),
        ("rollout.n=0", "'rollout.n' must be in [1, 65536] (a group's size; more is a typo), got 0"),
        # a group of 10^20 once reached the engine: an OverflowError, or a list of 10^9 rows
        (
            "rollout.n=100000000000000000000",
            "'rollout.n' must be in [1, 65536] (a group's size; more is a typo), got 100000000000000000000",
        ),
        ("actor.optim.betas=[0.9]", "'actor.optim.betas' must hold two values (beta1, beta2), got 1"),
        # once "model directory . has no config.json", from wherever the empty path was first read
        (
            "model.path=",
            "'model.path' is empty: name the model (a Hugging Face directory or Hub id, a turnrl run, "
            "a .gguf file, or smollm2-135m-instruct, the default)",
        ),
        # `file.py:` read as a YAML mapping: once "unknown config key 'rollout.agent.entrypoint.ag/good.py'"
        (
            "rollout.agent.entrypoint=ag/good.py:",
            "'rollout.agent.entrypoint' 'ag/good.py:' must be path/to/file.py:function or package.module:function",
        ),
        # a value where a section is: once "bad value for '?' ...: Merge error: int is not a subclass"
        (
            "actor.optim=5",
            "bad value for 'actor.optim' in override 'actor.optim=5': 'actor.optim' is a section of settings, "
            "not one value; set its keys (actor.optim.NAME=VALUE; --list-keys lists them)",
        ),
        (
            "eval=5",
            "bad value for 'eval' in override 'eval=5': 'eval' is a section of settings, not one value; set "
            "its keys (eval.NAME=VALUE; --list-keys lists them)",
        ),
        ("rollout.top_p=0", "'rollout.top_p' must be in (0, 1], got 0.0"),
        ("data.max_response_length=-5", "'data.max_response_length' must be >= 1, got -5"),
        ("trainer.save_freq=-1", "'trainer.save_freq' must be >= 0 (0 = only at the end), got -1"),
        ("trainer.seed=-1", "'trainer.seed' must be in [0, 4294967295] (numpy's seed range), got -1"),
        ("reward.timeout_s=-1", "'reward.timeout_s' must be >= 0 (0 = no limit), got -1.0"),
        ("algorithm.gamma=1.5", "'algorithm.gamma' must be in [0, 1], got 1.5"),
        ("rollout.server.timeout_s=0", "'rollout.server.timeout_s' must be > 0, got 0.0"),
        ("eval.n=-1", "'eval.n' must be in [0, 65536] (0 = no sampled pass), got -1"),
        ("eval.n=1000000000", "'eval.n' must be in [0, 65536] (0 = no sampled pass), got 1000000000"),
        (
            "trainer.total_epochs=0",
            "'trainer.total_epochs'=0 with trainer.total_training_steps=0 trains nothing",
        ),
    ],
)
def test_a_bad_number_is_one_line_naming_the_key(override, line):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value) == line


def test_a_section_switched_off_is_not_checked():
    """Nothing reads a disabled section's numbers (tests/unit/test_agent_config.py relies on it)."""
    load_config(None, ["rollout.multi_turn.python.memory_limit_mb=0", "critic.ppo_epochs=0"])
    with pytest.raises(
        ConfigError, match=r"'rollout\.multi_turn\.python\.memory_limit_mb' must be >= 1 or -1"
    ):
        load_config(None, ["rollout.multi_turn.enable=true", "rollout.multi_turn.python.memory_limit_mb=0"])
    with pytest.raises(ConfigError, match=r"'critic\.ppo_epochs' must be >= 1, got 0"):
        load_config(None, ["critic.enable=true", "critic.ppo_epochs=0"])


def test_a_config_made_in_code_is_checked_too():
    cfg = Config()
    cfg.actor.optim.lr = math.nan
    with pytest.raises(ConfigError, match=r"'actor\.optim\.lr' must be finite and > 0, got nan"):
        check_config(cfg)


@pytest.mark.parametrize(
    ("schema", "check", "override", "line"),
    [
        (
            SFTConfig,
            check_sft,
            "trainer.total_training_steps=-1",
            "'trainer.total_training_steps' must be >= 0 (0 = run trainer.total_epochs), got -1",
        ),
        (SFTConfig, check_sft, "optim.lr=nan", "'optim.lr' must be finite and > 0, got nan"),
        (RMConfig, check_rm, "trainer.micro_batch_size=0", "'trainer.micro_batch_size' must be >= 1, got 0"),
        (
            RMConfig,
            check_rm,
            "data.length_window=-1",
            "'data.length_window' must be >= 0 (0 = no sorting), got -1",
        ),
    ],
)
def test_supervised_configs_share_the_table(schema, check, override, line):
    args: list[Any] = ["data.train_files=[rows.jsonl]", override]
    with pytest.raises(ConfigError) as err:
        load_config(None, args, schema=schema, check=check)
    assert str(err.value) == line
