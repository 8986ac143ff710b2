"""The SFT loss mask, token by token: 1 exactly on what the assistant wrote (up to its EOS), 0 on the
system prompt, the user, the tool results, the headers and the newline after each turn's end.

The expected ids and masks are built here from string pieces written out by hand from the template,
independently of `turnrl.supervised.chat` (which finds the pieces by rendering prefixes)."""

import json

import pytest

from tests.support.chat_templates import NO_TOOLS_TEMPLATE, TOOL_TEMPLATE
from turnrl.agent.actions import JsonActions
from turnrl.config.supervised_schema import SFTDataConfig
from turnrl.models.loader import load_tokenizer
from turnrl.supervised.chat import ChatTemplateError, tokenize_conversation
from turnrl.supervised.sft_data import conversation

# a ChatML template that renders tool schemas and assistant tool calls (Hermes/Qwen style)
CALC = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
ROW = {
    "messages": [
        {"role": "user", "content": "What is 2+3?"},
        {
            "role": "assistant",
            "content": None,
            # OpenAI sends the arguments as a JSON string; templates want an object
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "assistant", "content": "The answer is 5."},
    ],
    "tools": [CALC],
}
SMOL_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def expected(tok, pieces: list[tuple[str, int]]) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    mask: list[int] = []
    for text, m in pieces:
        piece = tok(text, add_special_tokens=False)["input_ids"]
        ids += piece
        mask += [m] * len(piece)
    return ids, mask


def assert_token_by_token(tok, got, want_ids, want_mask):
    assert len(got.ids) == len(want_ids)
    for k, (i, m, wi, wm) in enumerate(zip(got.ids, got.mask, want_ids, want_mask, strict=True)):
        assert (i, m) == (wi, wm), f"token {k} {tok.decode([i])!r}: got mask {m}, want {wm}"


def test_two_turns_with_a_tool_call_rendered_by_the_template(tok):
    tok.chat_template = TOOL_TEMPLATE
    messages, tools = conversation(ROW, SFTDataConfig(), "chat.jsonl row 0")
    got = tokenize_conversation(tok, messages, tools, {tok.eos_token_id}, "chat.jsonl row 0")

    header = "<|im_start|>assistant\n"
    call = '<tool_call>{"name": "calc", "arguments": {"expr": "2+3"}}</tool_call><|im_end|>'
    pieces = [
        ("<|im_start|>system\nTools: calc<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n" + header, 0),
        (call, 1),  # the tool call and the end of the turn: what the model writes
        ("\n<|im_start|>tool\n5<|im_end|>\n" + header, 0),  # newline after EOS, the tool result, the header
        ("The answer is 5.<|im_end|>", 1),
    ]
    # the pieces are the template's own rendering (less the newline after the last EOS)
    whole = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    assert whole == "".join(p for p, _ in pieces) + "\n"
    assert_token_by_token(tok, got, *expected(tok, pieces))
    trained = [i for i, m in zip(got.ids, got.mask, strict=True) if m]
    assert tok.decode(trained) == call + "The answer is 5.<|im_end|>"


def test_inline_tool_calls_for_a_template_without_tool_support(tok):
    tok.chat_template = load_tokenizer("tiny-random").chat_template  # SmolLM2's: no tool calls, no tools
    row = {k: v for k, v in ROW.items() if k != "tools"}
    messages, tools = conversation(row, SFTDataConfig(tool_calls="inline"), "chat.jsonl row 0")
    got = tokenize_conversation(tok, messages, tools, {tok.eos_token_id}, "chat.jsonl row 0")

    header = "<|im_start|>assistant\n"
    call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call>'
    pieces = [
        (SMOL_SYSTEM + "<|im_start|>user\nWhat is 2+3?<|im_end|>\n" + header, 0),
        (call + "<|im_end|>", 1),
        ("\n<|im_start|>tool\n5<|im_end|>\n" + header, 0),
        ("The answer is 5.<|im_end|>", 1),
    ]
    assert_token_by_token(tok, got, *expected(tok, pieces))
    # what the model learns to write is what the RL agent's JSON format parses
    action = JsonActions({"calc"}).parse(call)
    assert action.kind == "tool" and action.calls[0].name == "calc"
    assert action.calls[0].arguments == {"expr": "2+3"}


def test_a_template_that_drops_tool_calls_fails_naming_the_row_and_the_setting(tok):
    tok.chat_template = NO_TOOLS_TEMPLATE  # SmolLM2's own renders neither tools nor tool calls
    row = {k: v for k, v in ROW.items() if k != "tools"}
    messages, tools = conversation(row, SFTDataConfig(), "chat.jsonl row 7")
    with pytest.raises(ChatTemplateError) as err:
        tokenize_conversation(tok, messages, tools, {tok.eos_token_id}, "chat.jsonl row 7")
    msg = str(err.value)
    assert "chat.jsonl row 7" in msg and "data.tool_calls=inline" in msg and "'calc'" in msg
    assert "\n" not in msg


def test_a_template_that_drops_tool_schemas_fails(tok):
    tok.chat_template = NO_TOOLS_TEMPLATE
    messages, tools = conversation(ROW, SFTDataConfig(tool_calls="inline"), "chat.jsonl row 2")
    with pytest.raises(ChatTemplateError, match=r"chat.jsonl row 2: .*tool schemas \('calc' is missing\)"):
        tokenize_conversation(tok, messages, tools, {tok.eos_token_id}, "chat.jsonl row 2")


def test_a_template_that_is_not_prefix_preserving_fails(tok):
    # renders earlier assistant turns as a stub (as templates that drop past reasoning do)
    tok.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
        "{% if m['role'] == 'assistant' and not loop.last %}{{ '[earlier]' }}{% else %}{{ m['content'] }}{% endif %}"
        "{{ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    row = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 2}
    messages, tools = conversation(row, SFTDataConfig(), "chat.jsonl row 3")
    with pytest.raises(
        ChatTemplateError, match=r"chat.jsonl row 3: .*not prefix-preserving.*data.chat_template"
    ):
        tokenize_conversation(tok, messages, tools, {tok.eos_token_id}, "chat.jsonl row 3")


def test_a_template_that_raises_is_one_line(tok):
    tok.chat_template = "{{ raise_exception('only user and assistant roles') }}"
    messages, tools = conversation(ROW, SFTDataConfig(), "chat.jsonl row 4")
    with pytest.raises(ChatTemplateError) as err:
        tokenize_conversation(tok, messages, tools, {tok.eos_token_id}, "chat.jsonl row 4")
    msg = str(err.value)
    assert msg.startswith("chat.jsonl row 4: the chat template cannot render") and "\n" not in msg
    assert "only user and assistant roles" in msg


def test_structured_tool_results_are_shown_as_json():
    row = {"messages": [{"role": "tool", "content": {"x": 1}}, {"role": "assistant", "content": "ok"}]}
    messages, _ = conversation(row, SFTDataConfig(), "r")
    assert messages[0]["content"] == json.dumps({"x": 1})
