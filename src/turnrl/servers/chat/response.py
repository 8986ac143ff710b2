"""OpenAI's `chat.completion` object from sampled token ids: content, tool calls, log-probs, usage.

    body, unparsed = chat_completion(tokenizer, "tiny-random", prompt_ids, gen, ChatOutput(stop=[...]))

A choice's `message.content` is its tokens decoded (special tokens skipped unless asked), cut before
a stop string (OpenAI: the stop string is not returned; `token_ids` keep it). With tool parsing on,
Hermes `<tool_call>{json}</tool_call>` blocks become `message.tool_calls` and `finish_reason`
"tool_calls"; a block that does not parse leaves the whole text as content, no calls, and the
choice's `unparsed_tool_calls` counts the bad blocks (turnrl's extension, also summed in `unparsed`).

    chunks = completion_chunks(body, include_usage=True)      # the same answer, streamed

The streamed form is OpenAI's `chat.completion.chunk` objects: a role chunk, content deltas, per tool
call its id and name then its arguments, a chunk with the `finish_reason`, and with `include_usage`
a last chunk with no choices and the usage (`role_chunk` alone can go out before the answer exists).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from turnrl.rollout.base import Generation
from turnrl.servers.chat.tool_calls import SPECIAL_MARKERS, parse_tool_calls, without_tokens

TopLogprobs = list[list[tuple[int, float]]]
"""Per response token, the k most likely (token id, log-prob), most likely first."""


@dataclass
class ChatOutput:
    """How the choices are written."""

    stop: list[str] = field(default_factory=list)
    tools: set[str] | None = None
    """Names that may be called; None = the output is not read for tool calls."""
    logprobs: bool = False
    top_logprobs: list[TopLogprobs] | None = None
    """Per choice; None = no alternatives (each token's `top_logprobs` is [])."""
    tokens_as_ids: bool = False
    """vLLM's `return_tokens_as_token_ids`: tokens are "token_id:N"."""
    return_token_ids: bool = False
    skip_special_tokens: bool = True
    tool_format: str = "hermes"
    """The format tool calls are read in (`servers.chat.tool_calls.FORMATS`)."""
    tool_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each tool's parameter schema by name: the XML format's values take their types from it."""
    stop_reason: bool = False
    """vLLM's `stop_reason` on each choice: the stop string that ended it, None when none did."""


def content_text(tokenizer: Any, ids: list[int], stop: list[str], reason: str, skip_special: bool) -> str:
    """The decoded choice, ending before the first stop string when one ended it."""
    text = tokenizer.decode(ids, skip_special_tokens=skip_special)
    if reason == "stop" and stop:
        cuts = [text.find(s) for s in stop if s in text]
        text = text[: min(cuts)] if cuts else text
    return text


def stop_string(text: str, stop: list[str], reason: str) -> str | None:
    """The stop string that ended a choice: of those in `text`, the one complete first; None when
    the choice ended otherwise (EOS, the budget)."""
    if reason != "stop":
        return None
    found = [(text.find(s) + len(s), -len(s), s) for s in stop if s and s in text]
    return min(found)[2] if found else None


def token_strings(tokenizer: Any, ids: list[int], as_ids: bool) -> list[str]:
    """Each token on its own, special ones included (what the log-probs are of)."""
    if as_ids:
        return [f"token_id:{t}" for t in ids]
    return [tokenizer.decode([t], skip_special_tokens=False) for t in ids]


def _entry(token: str, logprob: float) -> dict[str, Any]:
    # bytes of the decoded text, as vLLM gives them (a token that is part of one character decodes to U+FFFD)
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def logprobs_content(
    tokenizer: Any, ids: list[int], lps: list[float], top: TopLogprobs | None, as_ids: bool
) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content`: per token its text, log-prob, bytes and `top_logprobs`."""
    strings = token_strings(tokenizer, ids, as_ids)
    alternatives: dict[int, str] = {}
    if top is not None:  # every alternative's text, decoded once
        wanted = sorted({t for row in top for t, _ in row} - set(ids))
        alternatives = dict(zip(wanted, token_strings(tokenizer, wanted, as_ids), strict=True))
        alternatives.update(zip(ids, strings, strict=True))
    out = []
    for j, (token, lp) in enumerate(zip(strings, lps, strict=True)):
        item = _entry(token, lp)
        item["top_logprobs"] = [] if top is None else [_entry(alternatives[t], v) for t, v in top[j]]
        out.append(item)
    return out


def chat_choice(
    tokenizer: Any,
    index: int,
    ids: list[int],
    lps: list[float],
    reason: str,
    out: ChatOutput,
) -> tuple[dict[str, Any], int]:
    """One choice and how many of its tool calls did not parse."""
    text = content_text(tokenizer, ids, out.stop, reason, out.skip_special_tokens)
    message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": None}
    unparsed = 0
    if out.tools is not None:
        # [TOOL_CALLS] and <|python_tag|> are special tokens: read those formats with them kept
        keep = out.skip_special_tokens and out.tool_format in SPECIAL_MARKERS
        raw = content_text(tokenizer, ids, out.stop, reason, False) if keep else text
        parsed = parse_tool_calls(raw, out.tools, out.tool_format, out.tool_schemas)
        unparsed = parsed.unparsed
        if parsed.tool_calls:
            content = without_tokens(parsed.content, tokenizer.all_special_tokens) if keep else parsed.content
            message = {"role": "assistant", "content": content, "tool_calls": parsed.tool_calls}
            reason = "tool_calls"
    choice: dict[str, Any] = {"index": index, "message": message, "logprobs": None, "finish_reason": reason}
    if out.logprobs:
        top = out.top_logprobs[index] if out.top_logprobs is not None else None
        choice["logprobs"] = {"content": logprobs_content(tokenizer, ids, lps, top, out.tokens_as_ids)}
    if out.tools is not None:
        choice["unparsed_tool_calls"] = unparsed
    if out.return_token_ids:
        choice["token_ids"] = ids
    if out.stop_reason:  # the stop string is cut from the content: read it from the whole text
        whole = tokenizer.decode(ids, skip_special_tokens=out.skip_special_tokens)
        choice["stop_reason"] = stop_string(whole, out.stop, choice["finish_reason"])
    return choice, unparsed


def chat_completion(
    tokenizer: Any, model_id: str, prompt_ids: list[int], gen: Generation, out: ChatOutput
) -> tuple[dict[str, Any], int]:
    """The `chat.completion` body (plus turnrl's `policy_version`) and the unparsed tool calls of
    all its choices."""
    choices, unparsed = [], 0
    for index, (ids, lps, reason) in enumerate(
        zip(gen.response_ids, gen.log_probs, gen.finish_reasons, strict=True)
    ):
        choice, bad = chat_choice(tokenizer, index, ids, lps, reason, out)
        choices.append(choice)
        unparsed += bad
    completion_tokens = sum(len(ids) for ids in gen.response_ids)
    body = completion_body(model_id, prompt_ids, choices, completion_tokens, gen.policy_version, out)
    return body, unparsed


def completion_body(
    model_id: str,
    prompt_ids: list[int],
    choices: list[dict[str, Any]],
    completion_tokens: int,
    policy_version: int,
    out: ChatOutput,
    completion_id: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """The `chat.completion` around its choices (`chat_choice`), with usage and `policy_version`."""
    body: dict[str, Any] = {
        "id": completion_id or f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model_id,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),  # one prompt, however many choices (OpenAI counts it once)
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
        "policy_version": policy_version,
    }
    if out.return_token_ids:
        body["prompt_token_ids"] = prompt_ids
    return body


# -- streaming: the same answer as OpenAI's `chat.completion.chunk` objects ----------------------------
PIECE = re.compile(r"\s*\S{1,24}|\s+")
"""A streamed text delta: a word (with the spaces before it), long words cut; the pieces of a text
joined are the text."""
CHOICE_EXTRAS = ("token_ids", "unparsed_tool_calls")
"""turnrl's fields of a choice: sent on its chunk that carries `finish_reason`."""
BODY_EXTRAS = ("policy_version", "prompt_token_ids")
"""turnrl's fields of the body: sent on the chunks that carry a `finish_reason`."""


def pieces(text: str) -> list[str]:
    """`text` cut into deltas, in order (`"".join(pieces(t)) == t`)."""
    return PIECE.findall(text)


def _chunk(
    body: dict[str, Any], choices: list[dict[str, Any]], include_usage: bool, **extra: Any
) -> dict[str, Any]:
    chunk = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
        "choices": choices,
    }
    if include_usage:  # OpenAI: every chunk says `usage: null` but the last, which carries it
        chunk["usage"] = None
    chunk.update(extra)
    return chunk


def _delta(
    index: int, delta: dict[str, Any], logprobs: Any = None, reason: str | None = None
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}


def role_chunk(body: dict[str, Any], n: int = 1, include_usage: bool = False) -> dict[str, Any]:
    """The first chunk: each choice's role. `body` needs only `id`, `created` and `model`, so this
    chunk can go out before anything is generated."""
    return _chunk(body, [_delta(i, {"role": "assistant", "content": ""}) for i in range(n)], include_usage)


def _choice_deltas(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """One choice's deltas after its role: content pieces, then per tool call its id and name, then
    its arguments in pieces (each tool-call delta names the call's `index`)."""
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"content": p} for p in pieces(message.get("content") or "")]
    for k, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        head = {
            "index": k,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        deltas.append({"tool_calls": [head]})
        deltas += [
            {"tool_calls": [{"index": k, "function": {"arguments": p}}]}
            for p in pieces(function["arguments"])
        ]
    return deltas


def content_chunks(body: dict[str, Any], include_usage: bool = False) -> list[dict[str, Any]]:
    """A `chat.completion` as the chunks OpenAI streams after the role chunk: per choice its content
    and tool-call deltas, then a chunk with its `finish_reason` (and turnrl's fields); with
    `include_usage`, a last chunk with no choices and the usage. A choice's `logprobs` (every token's)
    ride on its first delta."""
    extras = {k: body[k] for k in BODY_EXTRAS if k in body}
    chunks = []
    for choice in body["choices"]:
        index, logprobs = choice["index"], choice.get("logprobs")
        for delta in _choice_deltas(choice):
            chunks.append(_chunk(body, [_delta(index, delta, logprobs)], include_usage))
            logprobs = None
        last = _delta(index, {}, logprobs, choice["finish_reason"])
        last.update({k: choice[k] for k in CHOICE_EXTRAS if k in choice})
        chunks.append(_chunk(body, [last], include_usage, **extras))
    if include_usage:
        chunks.append(_chunk(body, [], False, usage=body["usage"]))
    return chunks


def completion_chunks(body: dict[str, Any], include_usage: bool = False) -> list[dict[str, Any]]:
    """A `chat.completion` as the whole stream of `chat.completion.chunk` objects OpenAI sends for
    it (without the closing `[DONE]`, which is not JSON)."""
    head = role_chunk(body, len(body["choices"]), include_usage)
    return [head, *content_chunks(body, include_usage)]
