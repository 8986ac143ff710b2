"""What a dialect hands the gateway's core and what it gets back (see `dialects/__init__.py`).

A dialect reads its own request into a `Call`: OpenAI chat messages and function tools, the tool
choice, the token budget, stop strings, template variables; the core checks and plans it on the
episode's trajectory, runs it on the engine and records it, and hands back a `Reply` whose `choice`
is OpenAI's chat choice (the assistant message with its parsed tool calls, `finish_reason`,
log-probs). The dialect writes that as its own body, or its own server-sent events, and writes
every refusal in its own error shape.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnrl.errors import TurnrlInputError
from turnrl.servers.chat.response import ChatOutput
from turnrl.servers.refusal import Refusal


class BadRequest(Refusal):
    """A call the gateway refuses: its status (400 unless said) and one line starting with the
    field it names (`max_tokens: must be >= 1, got 0`). The dialect of the route writes it."""


def refused(err: TurnrlInputError) -> BadRequest:
    """The shared chat checks' refusal (`servers.chat.schema`, `template`) as the gateway's: those
    name `turnrl serve`; here the agent gateway answers."""
    return BadRequest(" ".join(str(err).replace("turnrl serve", "the agent gateway").split()))


FIELD = re.compile(r"^([A-Za-z_][\w.\[\]]*):")
"""A refusal's leading field path (`messages[2].role:`); a line that starts otherwise names none."""


def field_of(message: str) -> str | None:
    """The request field a refusal names (OpenAI's `param`), or None (`episode 'x': ...`)."""
    found = FIELD.match(message)
    return found.group(1) if found else None


@dataclass
class Call:
    """One model call in OpenAI chat's terms, whatever the dialect of its request."""

    messages: list[Any]
    """OpenAI chat messages (system/developer, user, assistant with `tool_calls`, tool); the core
    checks them (`servers.chat.schema.check_messages`)."""
    tools: list[Any] | None = None
    """OpenAI function tools `{"type": "function", "function": {name, description, parameters}}`."""
    tool_choice: Any = None
    """OpenAI's: None or "auto" (calls read from the output when there are tools), "none" (not
    read); any other is refused."""
    max_tokens: int | None = None
    """The call's own budget (None: what the episode leaves)."""
    max_tokens_field: str = "max_tokens"
    """The request field it came from, named when it is refused."""
    stop: list[str] = field(default_factory=list)
    stop_field: str = "stop"
    model: str | None = None
    """The model the request names (None or "": any; else it must be the gateway's)."""
    variables: dict[str, Any] | None = None
    """Chat template variables (`chat_template_kwargs`)."""
    ignore_eos: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    """What the request sent of temperature, top_p, top_k (null = off) and seed: never used (the
    run's sampling is), only counted when it differs."""
    stream: bool = False
    output: ChatOutput = field(default_factory=ChatOutput)
    """How the choice is written (log-probs, token ids); the core sets its stop strings and tools."""
    options: dict[str, Any] = field(default_factory=dict)
    """The dialect's own, for its rendering (`include_usage`, ...)."""


@dataclass
class Reply:
    """A call's answer. Before the engine has answered (a stream's first events) only the ids, the
    model and the prompt are known; `choice` is None until then."""

    call: Call
    model: str
    prompt_ids: list[int]
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Unique per call; a dialect prefixes its own (`chatcmpl-`, `msg_`, `resp_`)."""
    created: int = field(default_factory=lambda: int(time.time()))
    choice: dict[str, Any] | None = None
    """OpenAI's chat choice (`servers.chat.response.chat_choice`): `message` (content, tool_calls),
    `finish_reason` (stop, length, tool_calls), `logprobs`, turnrl's `token_ids` and
    `unparsed_tool_calls`."""
    completion_tokens: int = 0
    policy_version: int = 0


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: `event: <name>` (when named) and `data: <JSON>` (a str goes as is:
    OpenAI's closing `[DONE]`)."""
    text = data.encode() if isinstance(data, str) else orjson.dumps(data)
    head = b"" if event is None else b"event: " + event.encode() + b"\n"
    return head + b"data: " + text + b"\n\n"


@dataclass(frozen=True)
class Dialect:
    """One API the gateway speaks: its route and how it reads and writes (one module each)."""

    name: str
    path: str
    """The route under `/episodes/{episode_id}/v1` (`/chat/completions`)."""
    parse: Callable[[bytes], Call]
    """The request body as a Call; BadRequest naming the field (in this dialect's own terms)."""
    error: Callable[[str, int], dict[str, Any]]
    """A refusal (one line, its HTTP status) as this dialect's error body."""
    response: Callable[[Reply], dict[str, Any]]
    """The whole answer's body (`reply.choice` is set)."""
    stream_open: Callable[[Reply], list[bytes]]
    """The events sent at once, while the engine generates (`reply.choice` is None)."""
    stream_reply: Callable[[Reply], list[bytes]]
    """The events that follow once the answer is there, to the stream's last."""
    stream_error: Callable[[Reply, str, int], list[bytes]]
    """The events that end a stream the call failed in (the engine failed, the episode ended)."""
    bind: Callable[[Call, Any], Call] | None = None
    """For a dialect whose call may name an earlier answer of its episode (Responses'
    `previous_response_id`): the parsed call completed from what the dialect keeps for that episode
    (the `server.OpenEpisode`), or BadRequest. None: a call says all it means."""
