"""Tool calls in the model's own format, read into OpenAI `tool_calls`.

Models write their calls in one of four formats, named as `rollout.agent.tool_call_format` and
`turnrl serve --tool-call-format` name them:

    format       models                                  a call as the model writes it
    hermes       Qwen2.5, Qwen3, Hermes, SmolLM3, ...    <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>
    qwen3_xml    Qwen3-Coder, Qwen3.5                    <tool_call>\\n<function=f>\\n<parameter=x>\\n1\\n</parameter>\\n</function>\\n</tool_call>
    llama3_json  Llama 3.1, 3.2, 3.3                     {"name": "f", "parameters": {"x": 1}}  (or after <|python_tag|>)
    mistral      Mistral, Mistral Small, Devstral, ...   [TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}]  or  [TOOL_CALLS]f[ARGS]{"x": 1}

`auto` reads the format off the chat template's source (`detect_format`).

    parsed = parse_tool_calls('Let me look. <tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>')
    parsed.content      -> "Let me look."
    parsed.tool_calls   -> [{"id": "call_...", "type": "function",
                             "function": {"name": "search", "arguments": '{"q": "x"}'}}]
    parsed.unparsed     -> 0

A `<tool_call>` block is read by what it holds, JSON or `<function=...>`, in both the hermes and the
qwen3_xml format: Qwen's models write either. The XML form's values are text; each becomes the JSON
type the tool's parameter schema declares (`typed_value`). Several calls in one message are read in
order: Llama's separated by `;` or new lines, Mistral's in one JSON list or each after its own
`[TOOL_CALLS]`.

A call that does not parse (broken JSON, no name, an unknown tool) is never dropped: the whole text
stays the message's content, no call is returned, and `unparsed` counts the bad calls with `reasons`
saying why, so a server can report it and a trainer can count it.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import string
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("hermes", "qwen3_xml", "llama3_json", "mistral")
"""The tool-call formats read here."""
TOOL_CALL_FORMATS = ("auto", *FORMATS)
"""The values of the `tool_call_format` settings: `auto` detects the format from the chat template."""

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
OPEN_TAG = "<tool_call>"
FUNCTION = re.compile(r"<function=([^>\n]*)>(.*)</function>", re.DOTALL)
PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"
LLAMA_START = re.compile(r"<\|python_tag\|>|^[ \t]*(?=\{\s*\"name\"\s*:)", re.MULTILINE)
"""Where Llama's calls begin: its python tag, or a line that opens a JSON object with a name."""
MISTRAL_TAG = "[TOOL_CALLS]"
MISTRAL_NAMED = re.compile(r"([A-Za-z0-9_.:\-]+)(?:\[CALL_ID\]([A-Za-z0-9_\-]*))?\[ARGS\]")
"""Mistral's newer form after `[TOOL_CALLS]`: `name[ARGS]{...}`, with `[CALL_ID]id` between at times."""

SPECIAL_MARKERS = {"llama3_json": PYTHON_TAG, "mistral": MISTRAL_TAG}
"""Formats whose marker is a special token of their models' tokenizers: a decode that skips special
tokens drops it, so these formats are read from the text decoded with special tokens kept."""

_DECODER = json.JSONDecoder()
_NO = object()
"""`_as_type`'s answer for text that is not a value of the type asked."""


@dataclass
class ParsedMessage:
    """What one assistant message says: its text and its calls, OpenAI-shaped."""

    content: str | None
    """The text outside the calls (None when there is none and there are calls, as OpenAI sends)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """`{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}` per call."""
    unparsed: int = 0
    """Calls that could not be read; the text is then kept whole as content."""
    reasons: list[str] = field(default_factory=list)
    """Why each unparsed call failed, one line each."""


@dataclass
class Found:
    """What one format's reader found in a message: the text spans its calls take, the calls, and
    the reasons of those that did not parse."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    """(name, arguments, the call id the model wrote or None)."""
    reasons: list[str] = field(default_factory=list)

    def add(self, call: tuple[str, dict[str, Any]] | str, call_id: str | None = None) -> None:
        if isinstance(call, str):
            self.reasons.append(call)
        else:
            self.calls.append((*call, call_id))


# --- which format --------------------------------------------------------------------------------


def detect_format(template: str | None) -> str:
    """The format a chat template's source writes tool calls in; `hermes` when it does not say
    (turnrl's own templates write hermes). Qwen3-Coder's templates also hold `<tool_call>`, and
    Hermes templates for Llama models hold Llama's headers: the more specific marks are looked at first."""
    text = template or ""
    if "<function=" in text:
        return "qwen3_xml"
    if MISTRAL_TAG in text:
        return "mistral"
    if OPEN_TAG in text:
        return "hermes"
    if PYTHON_TAG in text or ("<|start_header_id|>" in text and '"parameters"' in text):
        return "llama3_json"
    return "hermes"


def resolve_format(setting: str, template: str | None) -> str:
    """The format to read: `setting` itself, or with `auto` the one `template` writes.
    ValueError names the allowed values for any other setting."""
    if setting == "auto":
        return detect_format(template)
    if setting not in FORMATS:
        raise ValueError(f"tool call format {setting!r}: must be one of {', '.join(TOOL_CALL_FORMATS)}")
    return setting


def parameter_schemas(tools: Sequence[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Each tool's `parameters` JSON schema by name, from an OpenAI `tools` list (what `typed_value`
    converts the XML form's text with)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            params = function.get("parameters")
            out[function["name"]] = params if isinstance(params, dict) else {}
    return out


# --- one call ------------------------------------------------------------------------------------


def call_of(data: Any, tools: set[str] | None = None) -> tuple[str, dict[str, Any]] | str:
    """`(name, arguments)` from one decoded call object (`arguments`, or Llama's `parameters`), or
    the one-line reason it is not a usable call. `tools`: the names that may be called (None = any)."""
    if not isinstance(data, dict):
        return f"tool call must be a JSON object, got {type(data).__name__}"
    name, args = data.get("name"), data.get("arguments", data.get("parameters", {}))
    if not isinstance(name, str) or not name:
        return "tool call has no 'name' string"
    if tools is not None and name not in tools:
        return f"unknown tool '{name}'; available: {', '.join(sorted(tools)) or 'none'}"
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # not JSON, an integer past the digit limit, deep nesting
            return f"arguments of '{name}' are not a JSON object"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"arguments of '{name}' must be a JSON object, got {type(args).__name__}"
    return name, args


def parse_call(raw: str, tools: set[str] | None = None) -> tuple[str, dict[str, Any]] | str:
    """`(name, arguments)` from one call's JSON, or the one-line reason it is not a usable call.
    `tools`: the names that may be called (None = any)."""
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as err:
        return f"tool call is not valid JSON ({err.msg} at char {err.pos})"
    except (ValueError, RecursionError) as err:  # an integer past the digit limit; deep nesting
        return f"tool call is JSON too large to read ({type(err).__name__})"
    return call_of(data, tools)


def declared_types(schema: Any) -> list[str]:
    """The JSON types a parameter's schema allows, in its order: `type` (a name or a list), else
    those of `anyOf`/`oneOf`, else what `properties`/`items` imply; [] when it says nothing."""
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return [t for option in schema[key] for t in declared_types(option)]
    if "properties" in schema:
        return ["object"]
    return ["array"] if "items" in schema else []


def _json_or_no(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return _NO


def _as_type(text: str, kind: str) -> Any:
    """`text` as a value of JSON type `kind`, or `_NO`."""
    word = text.strip()
    if kind == "string":
        return text
    if kind == "integer":
        return int(word) if re.fullmatch(r"-?\d{1,4000}", word) else _NO
    if kind == "number":
        value = _json_or_no(word)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return value if ok else _NO
    if kind == "boolean":
        return {"true": True, "false": False}.get(word.lower(), _NO)
    if kind == "null":
        return None if word.lower() in ("null", "none") else _NO
    if kind in ("object", "array"):
        value = _json_or_no(word)
        return value if isinstance(value, dict if kind == "object" else list) else _NO
    return _NO


def typed_value(text: str, schema: Any) -> Any:
    """An XML parameter's text as the first JSON type its schema declares that it reads as:
    integer (`3`), number (`2.5`), boolean (`true`/`false`, any case), null, object or array (JSON
    text); else, and with no schema, the text itself (the tool sees what the model wrote). The
    types are tried in the schema's order, but `null` first: a nullable string's `null` is None."""
    for kind in sorted(declared_types(schema), key=lambda k: k != "null"):
        value = _as_type(text, kind)
        if value is not _NO:
            return value
    return text


def _unwrapped(value: str) -> str:
    """A parameter's text without the one new line the format puts on each side of it."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def parse_xml_call(
    body: str, tools: set[str] | None = None, schemas: dict[str, dict[str, Any]] | None = None
) -> tuple[str, dict[str, Any]] | str:
    """`(name, arguments)` from one `<function=NAME><parameter=KEY>VALUE</parameter>...</function>`,
    values typed by `schemas[NAME]`, or the one-line reason it is not a usable call."""
    match = FUNCTION.fullmatch(body.strip())
    if match is None:
        return "tool call is not <function=NAME>...</function>"
    name, inner = match.group(1).strip(), match.group(2)
    if not name:
        return "tool call has no function name"
    if tools is not None and name not in tools:
        return f"unknown tool '{name}'; available: {', '.join(sorted(tools)) or 'none'}"
    properties = (schemas or {}).get(name, {}).get("properties")
    properties = properties if isinstance(properties, dict) else {}
    args: dict[str, Any] = {}
    end = 0
    for param in PARAMETER.finditer(inner):
        key = param.group(1).strip()
        if inner[end : param.start()].strip():
            return f"text outside <parameter=...> in the call of '{name}'"
        if not key or key in args:
            return f"parameter {key!r} of '{name}' is {'given twice' if key else 'unnamed'}"
        args[key] = typed_value(_unwrapped(param.group(2)), properties.get(key))
        end = param.end()
    if inner[end:].strip():
        return f"text outside <parameter=...> (or an unclosed <parameter>) in the call of '{name}'"
    return name, args


def _json_at(text: str, pos: int) -> tuple[Any, int] | str:
    """The JSON value starting at `pos` and where it ends, or the one-line reason there is none."""
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as err:
        return f"tool call is not valid JSON ({err.msg} at char {err.pos - pos})"
    except (ValueError, RecursionError) as err:
        return f"tool call is JSON too large to read ({type(err).__name__})"


# --- one message, per format ---------------------------------------------------------------------

Reader = Callable[[str, set[str] | None, dict[str, dict[str, Any]]], Found]


def read_tagged(text: str, tools: set[str] | None, schemas: dict[str, dict[str, Any]]) -> Found:
    """hermes and qwen3_xml: `<tool_call>` blocks, each JSON or `<function=...>` (read by its start)."""
    found = Found()
    blocks = list(TOOL_CALL.finditer(text))
    found.reasons += ["<tool_call> without </tool_call>"] * max(text.count(OPEN_TAG) - len(blocks), 0)
    for block in blocks:
        body = block.group(1).strip()
        found.spans.append(block.span())
        found.add(
            parse_xml_call(body, tools, schemas) if body.startswith("<function=") else parse_call(body, tools)
        )
    return found


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _llama_calls(text: str, pos: int, tagged: bool, found: Found, tools: set[str] | None) -> int:
    """Llama's calls from `pos`, added to `found`; where the last one ends. Untagged, an object
    without `parameters` (or `arguments`) is not a call but text, and ends the calls."""
    end = pos
    while True:
        pos = _skip(text, pos, " \t\r\n;")
        if text.startswith(PYTHON_TAG, pos):
            pos, tagged = pos + len(PYTHON_TAG), True
            continue
        if not text.startswith("{", pos):
            return end
        value = _json_at(text, pos)
        if isinstance(value, str):
            found.add(value)
            return end
        data, after = value
        if not tagged and isinstance(data, dict) and not {"parameters", "arguments"} & data.keys():
            return end
        found.add(call_of(data, tools))
        pos = end = after


def read_llama(text: str, tools: set[str] | None, schemas: dict[str, dict[str, Any]]) -> Found:
    """llama3_json: from `<|python_tag|>`, or a line opening `{"name": ...`, JSON calls separated by
    `;` or white space, to the first text that is not one (kept as content)."""
    found = Found()
    start = LLAMA_START.search(text)
    if start is None:
        return found
    tagged = text.startswith(PYTHON_TAG, start.start())
    end = _llama_calls(text, start.end(), tagged, found, tools)
    if tagged and not found.calls and not found.reasons:
        found.add(f"{PYTHON_TAG} without a JSON tool call after it")
    found.spans.append((start.start(), end))
    return found


def _mistral_json(text: str, pos: int, found: Found, tools: set[str] | None) -> int | None:
    """Mistral's first form after `[TOOL_CALLS]`: a JSON list of calls (or one call), ids kept."""
    value = _json_at(text, pos)
    if isinstance(value, str):
        found.add(value)
        return None
    data, end = value
    for item in data if isinstance(data, list) else [data]:
        call_id = item.get("id") if isinstance(item, dict) else None
        found.add(call_of(item, tools), call_id if isinstance(call_id, str) and call_id else None)
    return end


def _mistral_named(text: str, pos: int, found: Found, tools: set[str] | None) -> int | None:
    """Mistral's newer form after `[TOOL_CALLS]`: `name[ARGS]{...}` (or `name[CALL_ID]id[ARGS]{...}`)."""
    head = MISTRAL_NAMED.match(text, pos)
    if head is None:
        found.add(f"{MISTRAL_TAG} is followed by neither a JSON list of calls nor NAME[ARGS]{{...}}")
        return None
    value = _json_at(text, head.end())
    if isinstance(value, str):
        found.add(value)
        return None
    found.add(call_of({"name": head.group(1), "arguments": value[0]}, tools), head.group(2) or None)
    return value[1]


def read_mistral(text: str, tools: set[str] | None, schemas: dict[str, dict[str, Any]]) -> Found:
    """mistral: from the first `[TOOL_CALLS]`, each marker followed by a JSON list or `name[ARGS]{...}`."""
    found = Found()
    first = text.find(MISTRAL_TAG)
    if first < 0:
        return found
    pos: int | None = first
    end = first
    while pos is not None and text.startswith(MISTRAL_TAG, pos):
        at = _skip(text, pos + len(MISTRAL_TAG), " \t\r\n")
        read = _mistral_json if text[at : at + 1] in ("[", "{") else _mistral_named
        pos = read(text, at, found, tools)
        end = pos if pos is not None else end
        pos = _skip(text, pos, " \t\r\n") if pos is not None else None
    found.spans.append((first, end))
    return found


READERS: dict[str, Reader] = {
    "hermes": read_tagged,
    "qwen3_xml": read_tagged,
    "llama3_json": read_llama,
    "mistral": read_mistral,
}


def _call_id(fmt: str) -> str:
    # Mistral's templates refuse call ids that are not 9 letters and digits
    if fmt == "mistral":
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
    return f"call_{uuid.uuid4().hex[:24]}"


def openai_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    """One call in OpenAI's `tool_calls` shape (arguments as JSON text, key order kept)."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def _outside(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the `spans` (in order, not overlapping), stripped."""
    kept, at = [], 0
    for start, end in spans:
        kept.append(text[at:start])
        at = end
    return "".join([*kept, text[at:]]).strip()


def parse_tool_calls(
    text: str,
    tools: set[str] | None = None,
    fmt: str = "hermes",
    schemas: dict[str, dict[str, Any]] | None = None,
) -> ParsedMessage:
    """Split an assistant message into content and OpenAI tool calls (see the module docstring).
    `fmt`: one of `FORMATS` (resolve `auto` first); `schemas`: each tool's parameter schema by
    name (`parameter_schemas`), which the XML form's values are typed by."""
    if fmt not in READERS:
        raise ValueError(f"tool call format {fmt!r}: must be one of {', '.join(FORMATS)}")
    found = READERS[fmt](text, tools, schemas or {})
    if found.reasons:  # all or nothing: half a message's calls would run a plan the model did not finish
        return ParsedMessage(text, [], len(found.reasons), found.reasons)
    if not found.calls:
        return ParsedMessage(text)
    calls = [openai_call(name, args, call_id or _call_id(fmt)) for name, args, call_id in found.calls]
    return ParsedMessage(_outside(text, found.spans) or None, calls)


def without_tokens(text: str | None, tokens: Sequence[str]) -> str | None:
    """`text` less every occurrence of `tokens` (a tokenizer's special tokens), stripped; None when
    nothing is left. For content read from text decoded with special tokens kept (`SPECIAL_MARKERS`)."""
    if text is None:
        return None
    for token in sorted({t for t in tokens if t}, key=len, reverse=True):
        text = text.replace(token, "")
    return text.strip() or None


# --- a step's tool calls -------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeToolCalls:
    """One episode's tool calls, as a step's metrics count them."""

    offered: bool
    """Some call of the episode was read for tool calls (tools given, `tool_choice` auto)."""
    calls: int
    """Tool calls that parsed."""
    unparsed: int
    """Tool calls that did not."""


def tool_call_metrics(episodes: Sequence[EpisodeToolCalls]) -> dict[str, float]:
    """`agent/tool_calls/none_with_tools`: the fraction of the episodes offered tools that made no
    call that parsed (0 when none was offered). The unparsed count is `agent/unparsed_tool_calls`."""
    offered = [e for e in episodes if e.offered]
    none = sum(1 for e in offered if e.calls == 0)
    return {"agent/tool_calls/none_with_tools": none / len(offered) if offered else 0.0}


def tool_call_warning(episodes: Sequence[EpisodeToolCalls], fmt: str) -> str | None:
    """One line for a step whose episodes were offered tools and made no call that parsed at all
    (None otherwise): the model may write another format than `fmt`, or none."""
    offered = [e for e in episodes if e.offered]
    if not offered or any(e.calls for e in offered):
        return None
    unparsed = sum(e.unparsed for e in offered)
    seen = f"{unparsed} call(s) did not parse" if unparsed else "no call was written"
    return (
        f"none of {len(offered)} episode(s) offered tools made a tool call that parses in the {fmt} "
        f"format ({seen}); if the model writes another format, set rollout.agent.tool_call_format"
    )
