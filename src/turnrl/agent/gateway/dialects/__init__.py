"""The APIs the gateway speaks, one module each, listed in `DIALECTS`.

A dialect (`base.Dialect`) is a route under `/episodes/{episode_id}/v1` and five functions: `parse`
reads its request into a dialect-neutral `base.Call` (OpenAI chat messages and tools, tool choice,
budget, stop strings), `response` / `stream_open` + `stream_reply` write the `base.Reply` as its
body or its server-sent events, and `error` / `stream_error` write a refusal in its error shape.
The core (`gateway.calls`) does the rest for all of them alike: the checks of messages and tools,
the plan on the episode's trajectory, the engine call, the recording, a client that leaves.

    chat       POST /chat/completions    OpenAI's chat completions (`chat`)
    messages   POST /messages            Anthropic's Messages API (`messages`)
    responses  POST /responses           OpenAI's Responses API (`responses`, `responses_output`)

A new dialect is one module with a `DIALECT` and one line in `DIALECTS`.
"""

from __future__ import annotations

from turnrl.agent.gateway.dialects import chat, messages, responses
from turnrl.agent.gateway.dialects.base import Dialect

DIALECTS: list[Dialect] = [chat.DIALECT, messages.DIALECT, responses.DIALECT]
