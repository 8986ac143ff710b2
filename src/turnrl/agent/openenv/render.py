"""The prompting contract, as pure functions: an observation as text, a reply as an action."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from turnrl.agent.openenv.common import RESET_KEY, OpenEnvError
from turnrl.agent.openenv.probe import EnvShape

EMPTY = "(the environment sent an empty observation)"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def observation_text(observation: dict[str, Any]) -> str:
    """An observation (its fields; the server leaves out `reward`, `done` and `metadata`) as a
    message: one field is its value; several are `name: value` lines, in the env's order; a value
    that is not a string is written as JSON."""
    if not observation:
        return EMPTY
    if len(observation) == 1:
        return _text(next(iter(observation.values())))
    return "\n".join(f"{name}: {_text(value)}" for name, value in observation.items())


def tool_result_text(observation: dict[str, Any]) -> str:
    """A tool call's observation (`tool_name`, `result`, `error`) as a tool message: the MCP
    result's text parts (others as JSON), or `error: <message>`; any other observation as
    `observation_text` writes it."""
    if "tool_name" not in observation:
        return observation_text(observation)
    error = observation.get("error")
    if error:
        return f"error: {error.get('message', error) if isinstance(error, dict) else error}"
    result = observation.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        parts = [
            p["text"] if isinstance(p, dict) and p.get("type") == "text" else _text(p)
            for p in result["content"]
        ]
        text = "\n".join(parts)
        return f"error: {text}" if result.get("is_error") or result.get("isError") else text
    return "" if result is None else _text(result)


def first_messages(row: dict[str, Any], observation: str) -> list[dict[str, Any]]:
    """The first call's messages: the row's prompt (instructions; may be empty), then the reset's
    observation as a user message, joined to the row's last message when that is a user's text."""
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}] if prompt else []
    else:
        messages = [dict(m) for m in (prompt if prompt is not None else [])]
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
        last["content"] = f"{last['content']}\n\n{observation}" if last["content"] else observation
    else:
        messages.append({"role": "user", "content": observation})
    return messages


def reset_arguments(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The env's `reset` keyword arguments: the row's `extra_info.openenv_reset` ({} without one)."""
    extra = row.get("extra_info") or {}
    value = extra.get(RESET_KEY) if isinstance(extra, dict) else None
    if value is None:
        return {}
    if isinstance(value, str):  # a row written as JSON text
        with contextlib.suppress(ValueError):  # not JSON: refused below
            value = json.loads(value)
    if not isinstance(value, dict):
        raise OpenEnvError(
            f"{where}: the row's extra_info.{RESET_KEY} must be an object of reset arguments, "
            f"got {type(value).__name__}"
        )
    return value


_FENCE = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?```$", re.DOTALL)


def text_action(shape: EnvShape, content: str) -> tuple[dict[str, Any] | None, str]:
    """The action a text reply names, or (None, why not): its text in `shape.action_field`, else
    the JSON object it is (a ```json fence around it is allowed)."""
    if shape.action_field:
        return {shape.action_field: content}, ""
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        action = json.loads(text)
    except ValueError:
        return None, "it is not a JSON object"
    if not isinstance(action, dict):
        return None, f"it is JSON {type(action).__name__}, not an object"
    return action, ""


def invalid_action_text(shape: EnvShape, why: str) -> str:
    """What the model is told after a reply that is no action: why, and what an action is."""
    if shape.action_field:
        wanted = f"Reply with the {shape.action_field} to send."
    else:
        fields = ", ".join(f"{k} (required)" if req else k for k, req in shape.fields.items())
        wanted = f"Reply with one JSON object holding the action's fields: {fields or 'see the task'}."
    return f"The environment did not take that reply as an action: {why}. {wanted}"
