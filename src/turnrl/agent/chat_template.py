"""Tool results as tool messages of the model's own chat template, appended as new tokens only.

The model's assistant message is already in the context as the exact ids it generated. What the
template would add after it (the end of the assistant turn, the tool messages, the next assistant
header) is found by rendering a probe conversation twice and taking the difference. That is only
right when the template is prefix-preserving: rendering more messages never rewrites earlier ones
(templates that drop past reasoning, for instance, are not). `ToolMessages.probe` checks this once;
the caller falls back to tags inside the assistant message, with a warning, when it fails.
"""

from __future__ import annotations

from typing import Any

_SENTINEL = "\x1eTURNRL-CONTENT\x1e"
_BASE = [{"role": "user", "content": "question"}]


def _render(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


class ToolMessages:
    """Renders `tool` messages (and the next assistant header) after a generated assistant message."""

    def __init__(self, tokenizer: Any, message_end: str):
        self.tokenizer = tokenizer
        self.message_end = message_end
        """Template text after an assistant message's content, e.g. `<|im_end|>\\n`."""

    @classmethod
    def probe(cls, tokenizer: Any) -> ToolMessages | str:
        """A ToolMessages for this tokenizer, or the one-line reason its template cannot be used."""
        if not getattr(tokenizer, "chat_template", None):
            return "the tokenizer has no chat template"
        assistant = {"role": "assistant", "content": _SENTINEL}
        try:
            prompt = _render(tokenizer, _BASE, True)
            with_answer = _render(tokenizer, [*_BASE, assistant], False)
            with_tool = _render(tokenizer, [*_BASE, assistant, _tool("result")], True)
        except Exception as err:  # templates raise anything from jinja errors to custom exceptions
            return f"the chat template cannot render tool messages ({type(err).__name__}: {err})"
        if not with_answer.startswith(prompt) or _SENTINEL not in with_answer[len(prompt) :]:
            return "the chat template renders an assistant message differently from its generation prompt"
        if not with_tool.startswith(with_answer):
            return "the chat template is not prefix-preserving (a tool message rewrites earlier messages)"
        if "result" not in with_tool[len(with_answer) :]:
            return "the chat template drops tool messages"
        return cls(tokenizer, with_answer[with_answer.index(_SENTINEL) + len(_SENTINEL) :])

    def render(self, results: list[str], eos_text: str = "") -> str:
        """Text to append after the model's message: its end, the tool messages, the next header.

        `eos_text` is the end-of-message token the model generated (if it did): the template's own
        message end starts with it, and only the rest (often a newline) is appended."""
        assistant = {"role": "assistant", "content": _SENTINEL}
        before = _render(self.tokenizer, [*_BASE, assistant], False)
        after = _render(self.tokenizer, [*_BASE, assistant, *(_tool(r) for r in results)], True)
        text = appended_text(before, after, self.message_end, eos_text)
        if text is None:
            raise ValueError("chat template is not prefix-preserving for these tool messages")
        return text


def appended_text(before: str, after: str, message_end: str, eos_text: str = "") -> str | None:
    """What follows an assistant message already in the context, as ids the model generated: the
    template's rendering `after` new messages minus its rendering `before` them (ending with that
    assistant message), preceded by the message's end, less the part the model wrote itself as its
    EOS token. None when the template is not prefix-preserving there (`after` rewrites `before`).
    Every episode path appends through here: the built-in loop's tool messages, the gateway's
    deltas between an agent's calls.

    Worked example (ChatML, end `<|im_end|>\\n`), the model ended with its `<|im_end|>` token:
        before = "...<|im_start|>assistant\\nhi<|im_end|>\\n"
        after  = before + "<|im_start|>tool\\n2<|im_end|>\\n<|im_start|>assistant\\n"
        ->  "\\n" + "<|im_start|>tool\\n2<|im_end|>\\n<|im_start|>assistant\\n"
    """
    if not after.startswith(before):
        return None
    end = message_end
    if eos_text and end.startswith(eos_text):
        end = end[len(eos_text) :]  # the model wrote the message's end itself: its token stays
    return end + after[len(before) :]


def _tool(content: str) -> dict[str, Any]:
    return {"role": "tool", "content": content}
