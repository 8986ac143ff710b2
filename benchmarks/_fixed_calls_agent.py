"""The agent `agent_proxy.py` times: a fixed number of calls per episode, each followed by a tool
message, whatever the model writes, so every run does the same work. Written against the OpenAI
API only (any agent would look like this); the reward is 0: only the time is measured."""

from __future__ import annotations

import os

CALLS = int(os.environ.get("AGENT_PROXY_CALLS", "3"))
TOKENS = int(os.environ.get("AGENT_PROXY_TOKENS", "16"))


def run(client, model, row):  # type: ignore[no-untyped-def]
    messages = list(row["prompt"])
    for turn in range(CALLS):
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=TOKENS)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        if turn < CALLS - 1:
            messages.append({"role": "user", "content": "Go on."})
    return 0.0
