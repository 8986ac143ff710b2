"""OpenAI chat messages and tools, rendered to token ids with the model's own chat template.

    template = ChatTemplate(tokenizer)
    ids = template.prompt_ids(messages, tools)     # the generation prompt, as the model will see it

OpenAI's wire format and Hugging Face's templates disagree in two places, both fixed here before
rendering: message `content` may be a list of parts (`[{"type": "text", "text": ...}]`; joined
into text), and a tool call's `arguments` is JSON *text* on the wire but a mapping in templates
(Qwen's writes `arguments | tojson`; text would be quoted twice). Tools are passed as the template's
`tools` variable, exactly the OpenAI `tools` list. The text is tokenized without adding special
tokens: the template already wrote them.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.servers.chat.tool_calls import resolve_format


class ChatTemplateError(TurnrlInputError):
    """The messages cannot be rendered with this model's template; the message says why, in one line."""


def text_of(content: Any) -> str:
    """A message's content as text: a string, None (""), or a list of text parts (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ChatTemplateError(
                f"content[{i}]: only text parts ({{'type': 'text', 'text': ...}}) are supported"
            )
        parts.append(part["text"])
    return "".join(parts)


NOT_JSON = object()
"""What `json_value` returns for text that is not a JSON value it can hold."""


def json_value(text: str) -> Any:
    """`text` as JSON, or `NOT_JSON` when it is not JSON, or is JSON this process refuses to hold:
    an integer past Python's digit limit (ValueError) or nesting past the recursion limit. Clients'
    and models' text reaches here, so neither may raise."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return NOT_JSON


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI message as chat templates take it (content text, tool-call arguments a mapping)."""
    out = {k: v for k, v in message.items() if v is not None}
    out["content"] = text_of(message.get("content"))
    calls = []
    for call in message.get("tool_calls") or []:
        function = dict(call.get("function") or {})
        args = function.get("arguments")
        if isinstance(args, str):
            # text that is not JSON is kept: the template shows what the client sent
            value = json_value(args) if args.strip() else {}
            if value is not NOT_JSON:
                function["arguments"] = value
        calls.append({**call, "function": function})
    if calls:
        out["tool_calls"] = calls
    return out


class ChatTemplate:
    """Renders OpenAI messages (+ tools) with `tokenizer`'s chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                "the model's tokenizer has no chat template: chat requests cannot be rendered"
            )
        self.tokenizer = tokenizer

    @property
    def source(self) -> str:
        """The template's Jinja text (a tokenizer's named templates, `default` and `tool_use`, joined)."""
        text = self.tokenizer.chat_template
        if isinstance(text, dict):
            return "\n".join(v for v in text.values() if isinstance(v, str))
        return str(text)

    def tool_call_format(self, setting: str = "auto") -> str:
        """The tool-call format to read the model's text in (`servers.chat.tool_calls.FORMATS`):
        `setting`, or with `auto` the one this template writes. ValueError for an unknown setting."""
        return resolve_format(setting, self.source)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        variables: dict[str, Any] | None = None,
    ) -> str:
        """The template's text for `messages` (and `tools`), ending with the assistant header.
        `variables`: extra template variables (vLLM's `chat_template_kwargs`, e.g. `enable_thinking`)."""
        # a variable named like a parameter of the call (chat_template, tokenize, ...) would change the
        # call itself, a client-chosen template included: refused (the signature is read only when there
        # are variables: it costs a sizeable part of a small render, and the gateway renders per call)
        if variables:
            own = {"messages", "tools", *inspect.signature(self.tokenizer.apply_chat_template).parameters}
            for name in sorted(variables):
                if name in own or not name.isidentifier():
                    raise ChatTemplateError(
                        f"chat_template_kwargs.{name}: not a template variable that may be set"
                    )
        converted = [template_message(m) for m in messages]
        try:
            return self.tokenizer.apply_chat_template(
                converted,
                tools=tools or None,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                **(variables or {}),
            )
        except Exception as err:  # jinja errors, raise_exception() in templates, type errors
            raise ChatTemplateError(
                f"messages: the chat template cannot render them ({type(err).__name__}: {' '.join(str(err).split())})"
            ) from None

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (the template wrote the special tokens already)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        variables: dict[str, Any] | None = None,
    ) -> list[int]:
        """The generation prompt's ids."""
        return self.encode(self.render(messages, tools, variables=variables))
