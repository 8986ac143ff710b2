"""Agents whose moves are scripted (the tiny random model writes noise): each exercises one path of
the gateway and the function-agent rollout. Entrypoints: `tests/support/agents/scripted.py:<name>`."""

from __future__ import annotations

import asyncio
import time

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
MAX_TOKENS = 6


def _assistant(message) -> dict:
    """The SDK's message as the agent sends it back (what most agents do: `model_dump`)."""
    return message.model_dump()


def one_call(client, model, row):
    out = client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    return 1.0 if out.choices[0].message.content is not None else 0.0


def tool_loop(client, model, row):
    """Three calls with tool results (and a user nudge) in between, whatever the model wrote."""
    messages = list(row["prompt"])
    for turn in range(3):
        out = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, max_tokens=MAX_TOKENS
        )
        message = out.choices[0].message
        messages.append(_assistant(message))
        if turn == 2:
            break
        calls = message.tool_calls or []
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "408"})
        if not calls:
            messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": f"result {turn}"})
            messages.append({"role": "user", "content": "Go on."})
    return {"reward": 0.5, "turns": 3.0, "note": "not a number"}


async def async_loop(client, model, row):
    messages = list(row["prompt"])
    for _ in range(2):
        out = await client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS)
        messages.append({"role": "assistant", "content": out.choices[0].message.content})
        messages.append({"role": "user", "content": "Again."})
    return messages[:-1]  # its conversation: the last assistant message is scored by the rule


def raises(client, model, row):
    client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    return 1 / 0


def hangs(client, model, row):
    client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    time.sleep(3600)


async def hangs_async(client, model, row):
    await client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    await asyncio.sleep(3600)


def bad_return(client, model, row):
    client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    return "correct"


def nan_return(client, model, row):
    client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    return float("nan")


def no_calls(client, model, row):
    return 1.0


def rewrites_history(client, model, row):
    """The second call drops the first answer and asks again: it does not extend the first."""
    messages = list(row["prompt"])
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS)
    messages.append(
        {"role": "assistant", "content": "(summarised) " + (first.choices[0].message.content or "")}
    )
    messages.append({"role": "user", "content": "Again."})
    client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS)
    return 1.0


def many_calls(client, model, row):
    """Calls until the gateway refuses one (max_calls or the response budget), then raises with it."""
    messages = list(row["prompt"])
    while True:
        out = client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS)
        messages.append(_assistant(out.choices[0].message))
        messages.append({"role": "user", "content": "More."})


not_callable = 42


def tools_refused(client, model, row):
    """Sends tools where the template renders none: the gateway's 400 ends it (raised by the SDK)."""
    client.chat.completions.create(model=model, messages=row["prompt"], max_tokens=MAX_TOKENS)
    client.chat.completions.create(model=model, messages=row["prompt"], tools=TOOLS, max_tokens=MAX_TOKENS)
