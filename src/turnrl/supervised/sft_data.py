"""SFT rows -> tokenised conversations with their assistant masks.

A row holds OpenAI/verl chat messages under `data.messages_key` (system, user, assistant with
optional `tool_calls`, tool) and optionally tool schemas under `data.tools_key`; or a prompt and an
XML agent episode under `data.episode_key` (`episodes.py`). Rows are checked as they are read, so a
bad one stops the run at start-up with its file and row named.
"""

from __future__ import annotations

import json
from typing import Any

from turnrl.config.supervised_schema import SFTDataConfig
from turnrl.data.dataset import ROLES, DataError, read_rows
from turnrl.supervised.chat import Messages, Tokenized, tokenize_conversation
from turnrl.supervised.episodes import EpisodeEncoder
from turnrl.supervised.rows import Overlong, none_left, required


def load_conversations(
    files: list[str], tokenizer: Any, data: SFTDataConfig, eos_ids: set[int]
) -> list[Tokenized]:
    """Every usable conversation of `files`; those over `data.max_length` dropped or cut, and said."""
    out: list[Tokenized] = []
    reports = []
    episodes = EpisodeEncoder(tokenizer, data)
    for file in files:
        report = Overlong(file)
        for i, row in enumerate(read_rows(file)):
            where = f"{file} row {i}"
            if data.episode_key in row:  # an XML agent episode (`episodes.py`)
                tokenized = episodes.encode(row, where)
            else:
                messages, tools = conversation(row, data, where)
                tokenized = tokenize_conversation(tokenizer, messages, tools, eos_ids, where)
            report.rows += 1
            example = fit(tokenized, data, report)
            if example is not None:
                out.append(example)
        reports.append(report)
    if not out:
        hint = " or set data.truncation=right" if data.truncation == "drop" else ""
        raise none_left(reports, "conversations", data.max_length, hint)
    for report in reports:  # said once the run can go on: when it cannot, the error says it all
        report.warn("conversations", data.max_length)
    return out


def fit(example: Tokenized, data: SFTDataConfig, report: Overlong) -> Tokenized | None:
    """The example if it fits `data.max_length`; else dropped, or cut on the right (`data.truncation`)."""
    n = len(example.ids)
    if n <= data.max_length:
        return example
    if data.truncation == "drop":
        report.dropped.append(n)
        return None
    report.cut += 1
    cut = Tokenized(example.ids[: data.max_length], example.mask[: data.max_length])
    if not any(cut.mask):  # the assistant starts beyond the limit: nothing to learn from
        report.emptied += 1
        return None
    return cut


def conversation(row: dict[str, Any], data: SFTDataConfig, where: str) -> tuple[Messages, list[Any] | None]:
    """The row's messages, checked and normalised for the chat template, and its tool schemas."""
    raw = required(row, data.messages_key, "data.messages_key", where, "row")
    if not isinstance(raw, list) or not raw:
        raise DataError(
            f"{where}: '{data.messages_key}' must be a non-empty list of {{role, content}} messages"
        )
    messages = [_message(m, j, data.tool_calls == "inline", where) for j, m in enumerate(raw)]
    if not any(m["role"] == "assistant" for m in messages):
        roles = ", ".join(dict.fromkeys(m["role"] for m in messages))
        raise DataError(
            f"{where}: the conversation has no assistant message (roles: {roles}); SFT trains on the "
            "assistant's turns, so a row needs at least one"
        )
    return messages, _tools(row.get(data.tools_key), data.tools_key, where)


def _message(m: Any, j: int, inline: bool, where: str) -> dict[str, Any]:
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise DataError(f"{where}: message {j} needs a 'role' of {', '.join(ROLES)}; got {m!r:.80}")
    role, content = m["role"], m.get("content")
    if role == "tool" and isinstance(content, dict | list):
        content = json.dumps(content, ensure_ascii=False)  # a structured tool result, shown as JSON
    if content is not None and not isinstance(content, str):
        raise DataError(f"{where}: message {j} ('{role}') content must be text, got {type(content).__name__}")
    if content is None and not (role == "assistant" and m.get("tool_calls")):  # only a call may go without
        raise DataError(f"{where}: message {j} ('{role}') needs 'content' (text; an assistant may instead have tool_calls)")  # fmt: skip
    out: dict[str, Any] = {"role": role, "content": content or ""}
    for key in ("name", "tool_call_id"):  # templates that label tool results read these
        if m.get(key) is not None:
            out[key] = m[key]
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
        raise DataError(f"{where}: message {j}: 'tool_calls' must be a list, got {type(calls).__name__}")
    if calls and role != "assistant":
        raise DataError(
            f"{where}: message {j} is a '{role}' message with tool_calls; only assistants call tools"
        )
    calls = [_tool_call(c, j, where) for c in calls]
    if calls and inline:
        text = "\n".join(map(_inline, calls))
        out["content"] = f"{out['content']}\n{text}" if out["content"] else text
    elif calls:
        out["tool_calls"] = calls
    return out


def _inline(call: dict[str, Any]) -> str:
    """A call as text, the form turnrl's JSON agent format parses (`turnrl.agent.actions.JsonActions`)."""
    fn = call["function"]
    payload = json.dumps({"name": fn["name"], "arguments": fn["arguments"]}, ensure_ascii=False)
    return f"<tool_call>\n{payload}\n</tool_call>"


def _tool_call(call: Any, j: int, where: str) -> dict[str, Any]:
    """`{"type": "function", "function": {"name", "arguments": {...}}}`: arguments as an object,
    which is what Hugging Face chat templates expect (OpenAI sends a JSON string)."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(fn, dict) or not isinstance(name, str) or not name:
        raise DataError(f"{where}: message {j} has a tool call without a function name: {call!r:.80}")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            raise DataError(
                f"{where}: message {j}: the arguments of tool call '{name}' are not JSON"
            ) from None
    if not isinstance(args, dict):
        raise DataError(f"{where}: message {j}: the arguments of tool call '{name}' must be a JSON object")
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
    if isinstance(call, dict) and call.get("id") is not None:
        out["id"] = call["id"]
    return out


def _tools(raw: Any, key: str, where: str) -> list[Any] | None:
    if raw is None:
        return None
    if isinstance(raw, str):  # parquet files often hold the schemas as one JSON string
        try:
            raw = json.loads(raw) if raw.strip() else []
        except json.JSONDecodeError:
            raise DataError(f"{where}: '{key}' (data.tools_key) is a string but not JSON") from None
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise DataError(f"{where}: '{key}' (data.tools_key) must be a list of tool schemas (objects)")
    return raw or None
