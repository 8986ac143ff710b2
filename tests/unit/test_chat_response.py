"""`/v1/chat/completions`' pieces without a server: the request checks (`servers.chat.schema`), the
response builder with a known model text (`servers.chat.response`: tool calls parsed, unparsed ones
kept as content and counted, stop strings, log-probs), and the top-k log-probs of one more forward
(`servers.inference.top_logprobs`) against a plain forward. The tiny model cannot be made to write
a given text, so the text is tokenized here and handed to the builder as if sampled."""

from __future__ import annotations

import json

import pytest
import torch
from openai.types.chat import ChatCompletion

from turnrl.rollout.base import Generation
from turnrl.servers.chat.response import ChatOutput, chat_completion
from turnrl.servers.chat.schema import (
    ChatRequest,
    ChatRequestError,
    check_messages,
    check_options,
    check_tool_choice,
    check_tools,
    max_tokens_of,
)
from turnrl.servers.chat.template import ChatTemplate, ChatTemplateError
from turnrl.servers.inference.top_logprobs import top_logprobs

CALL = '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>'


def built(tok, text: str, reason: str = "stop", **out) -> tuple[dict, int]:
    ids = tok.encode(text, add_special_tokens=False)
    gen = Generation([ids], [[-0.5] * len(ids)], [reason], policy_version=3)
    body, unparsed = chat_completion(tok, "tiny-random", [1, 2, 3], gen, ChatOutput(**out))
    ChatCompletion.model_validate(body)  # exactly the shape the openai SDK reads
    return body, unparsed


def test_a_tool_call_is_parsed_into_tool_calls(tiny):
    tok = tiny[1]
    body, unparsed = built(tok, f"Let me look. {CALL}<|im_end|>", tools={"search"})
    choice = body["choices"][0]
    assert unparsed == 0 and choice["unparsed_tool_calls"] == 0
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] == "Let me look."
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "search"
    assert json.loads(call["function"]["arguments"]) == {"q": "x"}
    assert body["object"] == "chat.completion" and body["policy_version"] == 3
    n = len(tok.encode(f"Let me look. {CALL}<|im_end|>", add_special_tokens=False))
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}


def test_only_calls_no_content_is_none(tiny):
    body, _ = built(tiny[1], CALL, tools={"search"})
    assert body["choices"][0]["message"]["content"] is None


@pytest.mark.parametrize(
    "bad",
    [
        '<tool_call>{"name": "search", "arguments": {"q": </tool_call>',  # broken JSON
        '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>',  # not an offered tool
        '<tool_call>{"name": "search", "arguments": {}}',  # never closed
    ],
)
def test_an_unparsed_call_is_content_and_counted(tiny, bad):
    text = f"Hmm. {bad}"
    body, unparsed = built(tiny[1], text, tools={"search"})
    choice = body["choices"][0]
    assert unparsed == 1 and choice["unparsed_tool_calls"] == 1
    assert choice["message"] == {"role": "assistant", "content": text, "tool_calls": None}
    assert choice["finish_reason"] == "stop"


def test_without_tools_nothing_is_parsed(tiny):
    body, unparsed = built(tiny[1], f"Hi {CALL}", tools=None)
    choice = body["choices"][0]
    assert unparsed == 0 and "unparsed_tool_calls" not in choice
    assert choice["message"]["content"] == f"Hi {CALL}" and choice["finish_reason"] == "stop"


def test_stop_strings_token_ids_and_logprobs(tiny):
    tok = tiny[1]
    text = "one two. three"
    ids = tok.encode(text, add_special_tokens=False)
    body, _ = built(tok, text, stop=[". "], logprobs=True, return_token_ids=True)
    choice = body["choices"][0]
    assert choice["message"]["content"] == "one two"  # OpenAI: ends before the stop string
    assert choice["token_ids"] == ids and body["prompt_token_ids"] == [1, 2, 3]
    content = choice["logprobs"]["content"]
    assert [c["token"] for c in content] == [tok.decode([t]) for t in ids]
    assert all(c["logprob"] == -0.5 and c["top_logprobs"] == [] for c in content)
    assert [bytes(c["bytes"]).decode() for c in content] == [c["token"] for c in content]
    # cut at the stop string only when a stop string ended it
    assert built(tok, text, "length", stop=[". "])[0]["choices"][0]["message"]["content"] == text


def test_top_logprobs_entries_and_token_ids_as_tokens(tiny):
    tok = tiny[1]
    ids = tok.encode("a b", add_special_tokens=False)
    top = [[[(ids[0], -0.5), (7, -1.5)], [(9, -0.25), (ids[1], -0.5)]]]
    gen = Generation([ids], [[-0.5, -0.5]], ["length"])
    out = ChatOutput(logprobs=True, top_logprobs=top, tokens_as_ids=True)
    body, _ = chat_completion(tok, "m", [1], gen, out)
    content = body["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == [f"token_id:{t}" for t in ids]
    assert [[(e["token"], e["logprob"]) for e in c["top_logprobs"]] for c in content] == [
        [(f"token_id:{ids[0]}", -0.5), ("token_id:7", -1.5)],
        [("token_id:9", -0.25), (f"token_id:{ids[1]}", -0.5)],
    ]


def test_n_choices_share_one_prompt_in_usage(tiny):
    tok = tiny[1]
    gen = Generation([[5, 6], [7]], [[-1.0, -1.0], [-1.0]], ["length", "stop"])
    body, _ = chat_completion(tok, "m", [1, 2, 3, 4], gen, ChatOutput())
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


# ---------------------------------------------------------------- the request's checks


def test_messages_are_made_template_ready():
    messages = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        },
        {"role": "user", "content": "2+2?", "name": "ann"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
    ]
    out = check_messages(messages)
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1] == {"role": "user", "content": "2+2?", "name": "ann"}
    assert out[2]["content"] == "" and out[2]["tool_calls"][0]["function"]["name"] == "calc"
    assert out[3] == {"role": "tool", "content": "4", "tool_call_id": "c1"}


@pytest.mark.parametrize(
    ("messages", "line"),
    [
        ([], "messages: must be a non-empty list"),
        (["hi"], "messages[0]: must be an object"),
        ([{"role": "robot", "content": "x"}], "messages[0].role: 'robot' is not one of system, developer"),
        ([{"content": "x"}], "messages[0].role: missing one of"),
        ([{"role": "user", "contents": "x"}], "messages[0].contents: unknown field; did you mean 'content'?"),
        ([{"role": "user"}], "messages[0].content: missing"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "messages[0].content[0]: only text parts",
        ),
        (
            [{"role": "assistant"}],
            "messages[0].content: missing; an assistant message needs content or tool_calls",
        ),
        ([{"role": "tool", "content": "4"}], "messages[0].tool_call_id: must be a non-empty string"),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": ""}}]}],
            "messages[0].tool_calls[0].function.name: must be a non-empty string",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 3}}]}],
            "messages[0].tool_calls[0].function.arguments: must be JSON text",
        ),
    ],
)
def test_bad_messages_are_one_line_naming_the_field(messages, line):
    with pytest.raises(ChatRequestError) as err:
        check_messages(messages)
    assert str(err.value).startswith(line) and "\n" not in str(err.value), str(err.value)


def test_tools_and_tool_choice():
    tool = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
    assert check_tools([tool]) == ([tool], {"calc"})
    assert check_tools([]) == (None, set())
    with pytest.raises(ChatRequestError, match=r"tools\[1\].function.name: 'calc' is given twice"):
        check_tools([tool, tool])
    with pytest.raises(ChatRequestError, match=r"tools\[0\].type: only 'function' tools"):
        check_tools([{"type": "code_interpreter"}])
    assert check_tool_choice(None, [tool]) is True and check_tool_choice("auto", None) is False
    assert check_tool_choice("none", [tool]) is False
    with pytest.raises(ChatRequestError, match="tool_choice: 'required' is not supported"):
        check_tool_choice("required", [tool])
    with pytest.raises(ChatRequestError, match="tool_choice: a named function is not supported"):
        check_tool_choice({"type": "function", "function": {"name": "calc"}}, [tool])


def test_options_and_budgets():
    base = {"messages": [{"role": "user", "content": "x"}]}
    assert max_tokens_of(ChatRequest(**base)) == (None, "max_tokens")
    assert max_tokens_of(ChatRequest(**base, max_tokens=4)) == (4, "max_tokens")
    assert max_tokens_of(ChatRequest(**base, max_completion_tokens=5)) == (5, "max_completion_tokens")
    with pytest.raises(ChatRequestError, match="max_completion_tokens: 5 differs from max_tokens 4"):
        max_tokens_of(ChatRequest(**base, max_tokens=4, max_completion_tokens=5))
    check_options(ChatRequest(**base, stream=False, store=False, response_format={"type": "text"}, user="u"))
    for extra, words in [
        ({"stream": True}, "stream: not supported by turnrl serve (only false)"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls: not supported by turnrl serve (only true)"),
        ({"presence_penalty": 0.5}, "presence_penalty: not supported by turnrl serve (only 0.0)"),
        ({"response_format": {"type": "json_object"}}, "response_format: only {'type': 'text'}"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs: must be in [0, 20], got 21"),
        ({"top_logprobs": 2}, "top_logprobs: needs logprobs: true"),
    ]:
        with pytest.raises(ChatRequestError) as err:
            check_options(ChatRequest(**base, **extra))
        assert words in str(err.value)


def test_template_variables_cannot_change_the_call(tiny):
    template = ChatTemplate(tiny[1])
    messages = [{"role": "user", "content": "x"}]
    assert template.render(messages, variables={"enable_thinking": False}) == template.render(messages)
    for name in ("chat_template", "tokenize", "messages"):
        with pytest.raises(ChatTemplateError, match=f"chat_template_kwargs.{name}: not a template variable"):
            template.render(messages, variables={name: "x"})


# ---------------------------------------------------------------- top_logprobs against a plain forward


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_top_logprobs_equal_a_plain_forward(tiny, temperature):
    model = tiny[0]
    prompt, response = [504, 3575, 282, 4649, 314], [33, 1232, 216, 33, 446, 7]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    want = torch.log_softmax(logits / (temperature or 1.0), -1).topk(4, dim=-1)
    # chunk=2: the response goes through the KV cache in three pieces
    got = top_logprobs(model, prompt, response, temperature, 4, chunk=2)
    assert [[t for t, _ in row] for row in got] == want.indices.tolist()
    assert torch.allclose(torch.tensor([[v for _, v in row] for row in got]), want.values, atol=1e-4)
    # the sampled token's entry carries the engine's own number, so the two agree exactly
    sampled = torch.log_softmax(logits / (temperature or 1.0), -1).gather(-1, torch.tensor(response)[:, None])
    engine = [float(v) + 1e-6 for v in sampled.squeeze(-1)]  # as if the engine's differed in the last bits
    marked = top_logprobs(model, prompt, response, temperature, 4, sampled_logprobs=engine)
    for row, token, lp in zip(marked, response, engine, strict=True):
        assert all(v == lp for t, v in row if t == token)
    assert top_logprobs(model, prompt, [], temperature, 4) == []
