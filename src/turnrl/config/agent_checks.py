"""The rules of the agent settings (`rollout.multi_turn`, `rollout.agent`) that a type system cannot
express, checked by `check_config` before any tool server or agent program starts."""

from __future__ import annotations

import re
import shlex

from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.config.config_error import ConfigError, one_of
from turnrl.config.schema import Config

MULTI_TURN_FORMATS = ("xml", "json")
ON_ERROR_MODES = ("fail", "zero", "fail_first_step")


def check_multi_turn(mt: MultiTurnConfig) -> None:
    """`rollout.multi_turn` with `enable=true`: checked before any tool server starts (its numbers'
    ranges are on the fields)."""
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
TOOL_CALL_FORMATS: tuple[str, ...] = ("auto", "hermes", "qwen3_xml", "llama3_json", "mistral")
"""`rollout.agent.tool_call_format`: `servers.chat.tool_calls.TOOL_CALL_FORMATS` (the config layer
sits below the servers; a test keeps the two equal)."""
ENV_KINDS: dict[str, str] = {"verifiers:": "environment", "openenv:": "server URL"}
"""`rollout.agent.env`'s kinds of environment: prefix -> what follows it
(`turnrl.agent.functions.entrypoint.ENV_KINDS`, which loads them; a test keeps the two equal)."""


def check_function_agent(cfg: Config) -> None:
    """`rollout.agent` with an entrypoint: its form is checked here; whether it loads, when the
    rollout is built (that imports the user's file)."""
    ac, key = cfg.rollout.agent, "rollout.agent"
    named = [name for name in ("entrypoint", "env", "command") if getattr(ac, name)]
    if len(named) > 1:
        raise ConfigError(
            f"'{key}.{named[0]}' and '{key}.{named[1]}' are two ways to name the agent: set one"
        )
    if ac.test_command and not ac.command:
        raise ConfigError(f"'{key}.test_command' runs after '{key}.command': set the command too")
    for name in ("command", "test_command"):
        try:
            shlex.split(getattr(ac, name))
        except ValueError as err:
            raise ConfigError(f"'{key}.{name}' {getattr(ac, name)!r} is not a command line ({err})") from None
    if ac.env and not ac.env.startswith(tuple(ENV_KINDS)):
        forms = " or ".join(f"{prefix}<{what}>" for prefix, what in ENV_KINDS.items())
        raise ConfigError(f"'{key}.env' {ac.env!r}: environments are named {forms}")
    if ac.entrypoint and not ENTRYPOINT.fullmatch(ac.entrypoint.strip()):
        raise ConfigError(
            f"'{key}.entrypoint' {ac.entrypoint!r} must be path/to/file.py:function or package.module:function"
        )
    if cfg.rollout.multi_turn.enable:
        name = named[0]
        raise ConfigError(
            f"'{key}.{name}' and 'rollout.multi_turn.enable=true' are two agent modes: choose one"
        )
    one_of(f"{key}.on_error", ac.on_error, ON_ERROR_MODES)
    one_of(f"{key}.tool_call_format", ac.tool_call_format, TOOL_CALL_FORMATS)
