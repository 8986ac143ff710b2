"""A conversation -> token ids and a loss mask that is 1 exactly on the tokens the assistant wrote.

Searching one rendering of the whole conversation for the assistant's text is fragile (templates
add headers, strip whitespace, rewrite turns). Instead, for each assistant message i the model's
own chat template renders

    before_i  = render(messages[:i], add_generation_prompt=True)    # everything up to its header
    through_i = render(messages[:i + 1])                            # ... and the message itself

and the assistant's span is `through_i[len(before_i):]`. That is right only when the template is
prefix-preserving (rendering more messages never rewrites earlier ones), so every pair is checked
and a template that fails is one line naming the row.

The pieces are tokenised one by one and concatenated, the way an agent rollout builds its context:
the prompt alone, each assistant span alone, what the environment adds between them (the end of
the turn, tool messages, the next header) alone. The ids SFT trains on are then the ids an RL
episode holds. A span's mask ends at its first EOS token: a policy stops generating there, and
the newline some templates add after it is context the agent loop appends with mask 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.config.checks import ConfigError
from turnrl.data.dataset import DataError

Messages = list[dict[str, Any]]


class ChatTemplateError(DataError):
    """A chat template that cannot render a row the way training needs: it raises, rewrites earlier
    messages when more follow (not prefix-preserving), or drops tool calls or tool schemas."""


@dataclass
class Tokenized:
    ids: list[int]
    mask: list[int]
    """1 where the assistant wrote the token (trained on), 0 elsewhere."""


def set_chat_template(tokenizer: Any, setting: str) -> None:
    """Apply `data.chat_template` (a Jinja file, or the template text itself) to the tokenizer."""
    if not setting:
        return
    if "{%" in setting or "{{" in setting:
        tokenizer.chat_template = setting
        return
    path = Path(setting).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"'data.chat_template': no such file {setting} (give a Jinja file or the template text)"
        )
    tokenizer.chat_template = path.read_text(encoding="utf-8")


def require_template(tokenizer: Any, model_path: str) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"the tokenizer of {model_path} has no chat template (a base model?); give one with data.chat_template"
        )


def render(
    tokenizer: Any, messages: Messages, tools: list[Any] | None, generation_prompt: bool, where: str
) -> str:
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception as err:  # templates raise anything: jinja errors, TypeError on a None, custom ones
        first = (str(err).strip().splitlines() or [""])[0]
        calls = any(m.get("tool_calls") for m in messages)
        hint = "; data.tool_calls=inline writes tool calls into the content instead" if calls else ""
        raise ChatTemplateError(
            f"{where}: the chat template cannot render this conversation ({type(err).__name__}: {first}){hint}"
        ) from None
    return str(text)


def tokenize_conversation(
    tokenizer: Any, messages: Messages, tools: list[Any] | None, eos_ids: set[int], where: str
) -> Tokenized:
    """Ids of the conversation through its last assistant message, and the assistant-token mask."""
    pieces: list[tuple[str, bool]] = []  # (text, written by the assistant)
    done = ""  # the rendering cut into pieces so far
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(tokenizer, messages[:i], tools, True, where)
        through = render(tokenizer, messages[: i + 1], tools, False, where)
        if not before.startswith(done):
            raise ChatTemplateError(
                f"{where}: the chat template is not prefix-preserving: rendering message {i} rewrites the "
                "messages before it (templates that drop earlier reasoning do this), so the assistant's tokens "
                "cannot be located; give one that is with data.chat_template"
            )
        if not through.startswith(before):
            raise ChatTemplateError(
                f"{where}: the chat template renders assistant message {i} differently from its generation "
                "prompt (add_generation_prompt=True), so the assistant's tokens cannot be located; give one "
                "that does not with data.chat_template"
            )
        if not done and tools:
            _check_tools(tools, before, where)
        span = through[len(before) :]
        _check_tool_calls(message, span, i, where)
        pieces += [(before[len(done) :], False), (span, True)]
        done = through
    ids: list[int] = []
    mask: list[int] = []
    for text, written in pieces:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        mask += _span_mask(piece, eos_ids) if written else [0] * len(piece)
    end = max(j for j, m in enumerate(mask) if m) + 1 if any(mask) else len(ids)
    return Tokenized(ids[:end], mask[:end])  # what follows the last EOS predicts nothing trained


def _span_mask(piece: list[int], eos_ids: set[int]) -> list[int]:
    """1 up to and including the first EOS (where generation stops), 0 after it."""
    end = next((j + 1 for j, t in enumerate(piece) if t in eos_ids), len(piece))
    return [1] * end + [0] * (len(piece) - end)


def _check_tool_calls(message: dict[str, Any], span: str, i: int, where: str) -> None:
    for call in message.get("tool_calls") or []:
        name = call["function"]["name"]
        if name not in span:
            raise ChatTemplateError(
                f"{where}: the chat template does not render tool calls (assistant message {i} calls "
                f"'{name}', which its rendering lacks); set data.tool_calls=inline to write them into the "
                "content as <tool_call>{json}</tool_call>, or give a template that renders them with data.chat_template"
            )


def _check_tools(tools: list[Any], prompt: str, where: str) -> None:
    for tool in tools:
        name = tool.get("function", tool).get("name") if isinstance(tool, dict) else None
        if isinstance(name, str) and name not in prompt:
            raise ChatTemplateError(
                f"{where}: the chat template does not render the row's tool schemas ('{name}' is missing); "
                "describe the tools in the system message instead, or give a template that renders them "
                "with data.chat_template"
            )
