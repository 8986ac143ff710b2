"""OpenAI's `chat.completion` object from sampled token ids: content, tool calls, log-probs, usage.

    body, unparsed = chat_completion(tokenizer, "tiny-random", prompt_ids, gen, ChatOutput(stop=[...]))

A choice's `message.content` is its tokens decoded (special tokens skipped unless asked), cut before
a stop string (OpenAI: the stop string is not returned; `token_ids` keep it). With tool parsing on,
Hermes `<tool_call>{json}</tool_call>` blocks become `message.tool_calls` and `finish_reason`
"tool_calls"; a block that does not parse leaves the whole text as content, no calls, and the
choice's `unparsed_tool_calls` counts the bad blocks (turnrl's extension, also summed in `unparsed`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from turnrl.rollout.base import Generation
from turnrl.servers.chat.tool_calls import parse_tool_calls

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


def content_text(tokenizer: Any, ids: list[int], stop: list[str], reason: str, skip_special: bool) -> str:
    """The decoded choice, ending before the first stop string when one ended it."""
    text = tokenizer.decode(ids, skip_special_tokens=skip_special)
    if reason == "stop" and stop:
        cuts = [text.find(s) for s in stop if s in text]
        text = text[: min(cuts)] if cuts else text
    return text


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
        parsed = parse_tool_calls(text, out.tools)
        unparsed = parsed.unparsed
        if parsed.tool_calls:
            message = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.tool_calls}
            reason = "tool_calls"
    choice: dict[str, Any] = {"index": index, "message": message, "logprobs": None, "finish_reason": reason}
    if out.logprobs:
        top = out.top_logprobs[index] if out.top_logprobs is not None else None
        choice["logprobs"] = {"content": logprobs_content(tokenizer, ids, lps, top, out.tokens_as_ids)}
    if out.tools is not None:
        choice["unparsed_tool_calls"] = unparsed
    if out.return_token_ids:
        choice["token_ids"] = ids
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
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),  # one prompt, however many choices (OpenAI counts it once)
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
        "policy_version": gen.policy_version,
    }
    if out.return_token_ids:
        body["prompt_token_ids"] = prompt_ids
    return body, unparsed
