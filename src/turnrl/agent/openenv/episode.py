"""One episode: reset, then model call -> action -> step, until the env is done or the turns run out."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnrl.agent.openenv.common import OpenEnvEpisodeError
from turnrl.agent.openenv.probe import EnvShape
from turnrl.agent.openenv.render import (
    first_messages,
    invalid_action_text,
    observation_text,
    reset_arguments,
    text_action,
    tool_result_text,
)
from turnrl.agent.openenv.session import EnvAnswer, Session, open_session
from turnrl.agent.openenv.spec import Spec

BAD_ACTION = "VALIDATION_ERROR"
"""The code of a step the env refused as an action it does not take (told to the model)."""


@dataclass
class Play:
    """An episode's conversation and what the env paid."""

    messages: list[dict[str, Any]]
    rewards: list[float] = field(default_factory=list)
    """Each step's reward (a step without one: 0)."""
    done: bool = False
    invalid: int = 0
    """Replies that were no action the env took."""

    def paid(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Book a step's answer; its observation."""
        reward = answer.get("reward")
        self.rewards.append(float(reward) if isinstance(reward, int | float) else 0.0)
        self.done = bool(answer.get("done"))
        observation = answer.get("observation")
        return observation if isinstance(observation, dict) else {}

    def result(self, mode: str) -> dict[str, float]:
        """`{"reward", "env_steps", "env_done", "invalid_actions"}` (the module docstring of the package)."""
        total = sum(self.rewards) if mode == "sum" else (self.rewards[-1] if self.rewards else 0.0)
        return {
            "reward": total,
            "env_steps": float(len(self.rewards)),
            "env_done": float(self.done),
            "invalid_actions": float(self.invalid),
        }


async def play_episode(
    spec: Spec,
    shape: EnvShape,
    client: Any,
    model: str,
    row: dict[str, Any],
    max_turns: int,
    timeout_s: float,
    on_wait: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Play one episode of the env against `client` (an `openai.AsyncOpenAI`); its numbers.
    OpenEnvEpisodeError (one line) when the server fails the episode."""
    arguments = reset_arguments(row, spec.where)
    try:
        session, first = await open_session(spec, arguments, timeout_s, on_wait)
    except EnvAnswer as err:
        raise OpenEnvEpisodeError(
            spec.where, f"had its reset fail in the environment ({err.code}): {err.message}"
        ) from None
    try:
        play = Play(first_messages(row, observation_text(_observation(first))), done=bool(first.get("done")))
        for _ in range(max_turns):
            if play.done:
                break
            message = await _reply(client, model, play.messages, shape.tools, spec.max_tokens)
            if message is None:  # the response budget ran out: the episode ends with what it earned
                break
            play.messages.append(message.model_dump())
            moved = await (_tool_turn if shape.tools else _text_turn)(session, shape, play, message)
            if not moved:
                break
        return play.result(spec.reward)
    except EnvAnswer as err:
        raise OpenEnvEpisodeError(
            spec.where, f"had a step fail in the environment ({err.code}): {err.message}"
        ) from None
    finally:
        await session.close()


def _observation(answer: dict[str, Any]) -> dict[str, Any]:
    observation = answer.get("observation")
    return observation if isinstance(observation, dict) else {}


async def _reply(
    client: Any, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int
) -> Any:
    """The model's next message, or None when the gateway refused the call for the response
    budget (`context_length_exceeded`: the episode is truncated, not failed)."""
    import openai

    extra: dict[str, Any] = {"tools": tools} if tools else {}
    if max_tokens:
        extra["max_tokens"] = max_tokens
    try:
        out = await client.chat.completions.create(model=model, messages=messages, **extra)
    except openai.BadRequestError as err:
        if getattr(err, "code", None) == "context_length_exceeded":
            return None
        raise
    return out.choices[0].message


async def _text_turn(session: Session, shape: EnvShape, play: Play, message: Any) -> bool:
    """The reply's text as the action; the step's observation (or why the reply was no action) as
    the next user message. Always goes on (a turn limit or the env's `done` ends the episode)."""
    action, why = text_action(shape, message.content or "")
    if action is None:
        play.invalid += 1
        play.messages.append({"role": "user", "content": invalid_action_text(shape, why)})
        return True
    try:
        observation = play.paid(await session.step(action))
    except EnvAnswer as err:
        if err.code != BAD_ACTION:
            raise
        play.invalid += 1
        play.messages.append({"role": "user", "content": invalid_action_text(shape, err.message)})
        return True
    play.messages.append({"role": "user", "content": observation_text(observation)})
    return True


async def _tool_turn(session: Session, shape: EnvShape, play: Play, message: Any) -> bool:
    """Each tool call a step (`call_tool`), its observation the call's tool message; a reply
    without a tool call ends the episode (the model answered instead of acting)."""
    calls = message.tool_calls or []
    for call in calls:
        if play.done:
            break  # the env ended the episode: the reply's later calls are not made
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            play.invalid += 1
            text = f"error: the arguments of {call.function.name} are not a JSON object"
        else:
            action = {"type": "call_tool", "tool_name": call.function.name, "arguments": arguments}
            try:
                text = tool_result_text(play.paid(await session.step(action)))
            except EnvAnswer as err:
                if err.code != BAD_ACTION:
                    raise
                play.invalid += 1
                text = f"error: the environment refused the call: {err.message}"
        play.messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return bool(calls)
