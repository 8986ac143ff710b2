"""`POST /v1/chat/completions` end to end: one real `turnrl serve --model tiny-random --threads 1`
child with `--chat-template` (a template that renders tools and tool calls), and the real `openai`
SDK as the client.

The test process builds the same tiny-random model (seed 0) and renders the same template, and
checks what the server returns against them: the prompt ids, the content as the decoded ids, greedy
output equal to the in-process engine's, log-probs and top log-probs equal to a plain forward's. A
random model writes no tool call; parsing them is unit-tested (tests/unit/test_chat_response.py);
here a conversation that contains assistant tool calls and tool results goes through the template.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest
import torch

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.serving import recomputed, serve_process
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.chat.schema import check_messages
from turnrl.servers.chat.template import ChatTemplate

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expr": {"type": "string"}},
                "required": ["expr"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expr": "2+2"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
]


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    template = tmp_path_factory.mktemp("chat") / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    proc = serve_process(
        tmp_path_factory.getbasetemp(), extra_args=["--threads", "1", "--chat-template", str(template)]
    )
    with proc:
        yield proc


@pytest.fixture(scope="module")
def client(child):
    with openai.OpenAI(base_url=child.url + "/v1", api_key=child.api_key, max_retries=0, timeout=60) as c:
        yield c


def prompt_of(tok, messages, tools=None) -> list[int]:
    """The prompt ids the child renders: the same checks and template, in this process."""
    saved, tok.chat_template = tok.chat_template, TOOL_TEMPLATE
    try:
        return ChatTemplate(tok).prompt_ids(check_messages(messages), tools)
    finally:
        tok.chat_template = saved


def chat(client, **kw):
    kw.setdefault("model", "tiny-random")
    kw.setdefault("messages", HELLO)
    return client.chat.completions.create(**kw)


def test_a_plain_call_with_token_ids(client, tiny):
    r = chat(client, max_completion_tokens=6, temperature=0, extra_body={"return_token_ids": True})
    assert r.object == "chat.completion" and r.model == "tiny-random" and r.id.startswith("chatcmpl-")
    assert r.model_extra["policy_version"] == 0
    (c,) = r.choices
    prompt, ids = r.model_extra["prompt_token_ids"], c.model_extra["token_ids"]
    assert prompt == prompt_of(tiny[1], HELLO)
    assert c.message.role == "assistant" and c.message.tool_calls is None
    assert c.message.content == tiny[1].decode(ids, skip_special_tokens=True)
    assert c.finish_reason in ("stop", "length") and c.logprobs is None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(prompt), len(ids))
    assert r.usage.total_tokens == len(prompt) + len(ids)
    # greedy: exactly the in-process engine's tokens
    want = HFEngine(*tiny).generate([prompt], SamplingParams(max_new_tokens=6, temperature=0.0))
    assert ids == want.response_ids[0] and c.finish_reason == want.finish_reasons[0]


def test_the_sdks_own_message_goes_back_as_history(client):
    """What an agent loop does: append `message.model_dump()` (nulls for audio, function_call,
    annotations, ... included) and ask again; a null is an absent key, not an unknown field."""
    first = chat(client, max_tokens=4, temperature=0).choices[0].message
    dumped = first.model_dump()
    assert any(v is None for v in dumped.values())  # the SDK does send nulls
    again = chat(
        client, max_tokens=4, temperature=0, messages=[*HELLO, dumped, {"role": "user", "content": "ok"}]
    )
    assert again.choices[0].message.role == "assistant"


def test_n_seed_and_greedy_determinism(client):
    def sample(**kw):
        r = chat(client, n=3, max_tokens=6, extra_body={"return_token_ids": True}, **kw)
        assert [c.index for c in r.choices] == [0, 1, 2]
        return [c.model_extra["token_ids"] for c in r.choices]

    seeded = sample(temperature=2.0, seed=11)
    assert sample(temperature=2.0, seed=11) == seeded
    assert len({tuple(ids) for ids in seeded}) > 1  # three samples, not one copied
    greedy = sample(temperature=0)
    assert greedy[0] == greedy[1] == greedy[2] and sample(temperature=0) == greedy


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_and_top_logprobs_equal_a_plain_forward(client, tiny, temperature):
    r = chat(
        client,
        max_tokens=5,
        temperature=temperature,
        seed=3,
        logprobs=True,
        top_logprobs=4,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    (c,) = r.choices
    prompt, ids = r.model_extra["prompt_token_ids"], c.model_extra["token_ids"]
    content = c.logprobs.content
    assert [e.token for e in content] == [f"token_id:{t}" for t in ids]
    got = torch.tensor([e.logprob for e in content])
    assert torch.allclose(got, recomputed(tiny[0], prompt, ids, temperature), atol=1e-4)
    with torch.no_grad():
        logits = tiny[0](torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    want = torch.log_softmax(logits / (temperature or 1.0), -1).topk(4, dim=-1)
    tops = [[int(a.token.removeprefix("token_id:")) for a in e.top_logprobs] for e in content]
    assert tops == want.indices.tolist()
    assert torch.allclose(
        torch.tensor([[a.logprob for a in e.top_logprobs] for e in content]), want.values, atol=1e-4
    )
    for e, token in zip(content, ids, strict=True):
        if temperature == 0:  # greedy: the sampled token is the top one, with the very same number
            assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        assert all(a.logprob == e.logprob for a in e.top_logprobs if a.token == f"token_id:{token}")
    # text tokens: bytes are the token's UTF-8, and logprobs without top_logprobs have none
    plain = chat(client, max_tokens=3, temperature=0, logprobs=True).choices[0].logprobs.content
    assert all(bytes(e.bytes).decode() == e.token and e.top_logprobs == [] for e in plain)


def test_max_tokens_max_completion_tokens_and_stop(client, tiny):
    def ids_of(r):
        return r.choices[0].model_extra["token_ids"]

    body = {"temperature": 0, "extra_body": {"return_token_ids": True, "ignore_eos": True}}
    full = chat(client, max_tokens=8, **body)
    assert len(ids_of(full)) == 8 and full.choices[0].finish_reason == "length"
    assert ids_of(chat(client, max_completion_tokens=3, **body)) == ids_of(full)[:3]
    with pytest.raises(openai.BadRequestError, match="max_completion_tokens: 3 differs from max_tokens 4"):
        chat(client, max_tokens=4, max_completion_tokens=3, **body)
    # a stop string the greedy text contains: it ends there, without the stop string; the ids keep it
    text = tiny[1].decode(ids_of(full), skip_special_tokens=False)
    stop = tiny[1].decode(ids_of(full)[4:6], skip_special_tokens=False)
    r = chat(client, max_tokens=8, stop=[stop], **body)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == text[: text.find(stop)]
    cut = ids_of(r)
    assert cut == ids_of(full)[: len(cut)] and stop in tiny[1].decode(cut, skip_special_tokens=False)


def test_a_conversation_with_tool_calls_and_tool_results(client, child, tiny):
    prompt = prompt_of(tiny[1], CONVERSATION, TOOLS)
    text = tiny[1].decode(prompt)
    assert (
        "Tools: calculator" in text
        and '<tool_call>{"name": "calculator", "arguments": {"expr": "2+2"}}' in text
    )
    assert "<|im_start|>tool\n4<|im_end|>" in text
    for choice in ("auto", "none"):
        r = chat(
            client,
            messages=CONVERSATION,
            tools=TOOLS,
            tool_choice=choice,
            max_tokens=4,
            temperature=0,
            extra_body={"return_token_ids": True},
        )
        # "none" renders the same prompt: only the reading of calls changes
        assert r.model_extra["prompt_token_ids"] == prompt
        c = r.choices[0]
        assert c.message.tool_calls is None and c.finish_reason in ("stop", "length")
        assert c.model_extra.get("unparsed_tool_calls") == (0 if choice == "auto" else None)
    health = httpx.get(child.url + "/health", headers=child.headers).json()
    assert health["tool_calls_unparsed"] == 0


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"max_token": 3}, 400, "max_token: unknown field; did you mean 'max_tokens'?"),
        ({"tool_choice": "required", "tools": TOOLS}, 400, "tool_choice: 'required' is not supported"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role: 'robot' is not one of"),
        ({"messages": []}, 400, "messages: must be a non-empty list"),
        ({"n": 2000}, 413, "2000 rows exceed this server's 1024 rows per request (--max-rows-per-request)"),
        ({"max_tokens": 5000}, 400, "max_tokens: "),
        ({"max_completion_tokens": 0}, 400, "max_completion_tokens: must be >= 1"),
        ({"stream": True}, 400, "stream: not supported by turnrl serve (only false)"),
        ({"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs: must be in [0, 20]"),
        ({"model": "gpt-4o"}, 404, "model: 'gpt-4o' is not served here"),
        (
            {"chat_template_kwargs": {"chat_template": "{{ 'x' }}"}},
            400,
            "chat_template_kwargs.chat_template: not a template variable that may be set",
        ),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', 400, "temperature"),
        (b"", 400, "request body: missing"),
    ],
)
def test_bad_requests_get_one_line(child, body, status, words):
    url = child.url + "/v1/chat/completions"
    if isinstance(body, bytes):
        r = httpx.post(url, content=body, headers=child.headers, timeout=30)
    else:
        r = httpx.post(url, json={"messages": HELLO, **body}, headers=child.headers, timeout=30)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"] and "\n" not in r.json()["detail"], r.json()["detail"]
    assert httpx.get(child.url + "/health", headers=child.headers, timeout=2).status_code == 200


BAD_ARGUMENTS = [
    {"role": "user", "content": "What is 2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{bad"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
]


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (
            {"messages": BAD_ARGUMENTS},
            "messages[1].tool_calls[0].function.arguments: not JSON (Expecting property name enclosed in "
            "double quotes at line 1 column 2): '{bad'",
        ),
        ({"messages": HELLO, "temperature": "1"}, "temperature: Input should be a valid number"),
        ({"messages": HELLO, "max_tokens": "3"}, "max_tokens: Input should be a valid integer"),
        ({"messages": HELLO, "max_tokens": True}, "max_tokens: Input should be a valid integer"),
        ({"messages": HELLO, "logprobs": "yes"}, "logprobs: Input should be a valid boolean"),
    ],
    ids=[
        "arguments not JSON",
        "temperature a string",
        "max_tokens a string",
        "max_tokens true",
        "logprobs yes",
    ],
)
def test_what_was_taken_for_something_else_is_a_400_naming_it(child, client, body, detail):
    """Once served: tool-call arguments that are no JSON (the template showed the model the broken
    text), and numbers and booleans sent as strings or `true` (read as 3, 1.0, ...)."""
    r = httpx.post(child.url + "/v1/chat/completions", json=body, headers=child.headers, timeout=30)
    assert r.status_code == 400 and r.json() == {"detail": detail}, r.text
    assert httpx.get(child.url + "/health", headers=child.headers, timeout=2).status_code == 200
    # JSON integers for floats are numbers (what the SDK sends for temperature=1), and good arguments pass
    good = [
        *BAD_ARGUMENTS[:1],
        {**BAD_ARGUMENTS[1], "tool_calls": CONVERSATION[1]["tool_calls"]},
        BAD_ARGUMENTS[2],
    ]
    answer = chat(client, messages=good, max_tokens=2, temperature=1, top_p=1, seed=0)
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_the_sdk_sees_the_refusals(child, client):
    with pytest.raises(openai.BadRequestError, match="tool_choice: a named function is not supported"):
        chat(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "calculator"}})
    stranger = openai.OpenAI(base_url=child.url + "/v1", api_key="not the key", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError, match="api key: wrong key"):
        chat(stranger, max_tokens=2)
    r = httpx.post(child.url + "/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2})
    assert r.status_code == 401 and r.json()["detail"].startswith("api key: missing")
    assert chat(client, max_tokens=2, temperature=0).choices[0].finish_reason in ("stop", "length")


def test_chat_template_start_up_refusals(cli, tmp_path):
    nope = tmp_path / "no.jinja"
    r = cli("serve", "--model", "tiny-random", "--chat-template", str(nope))
    assert r.returncode == 1 and r.stderr.strip() == (
        f"turnrl serve: error: --chat-template {nope}: no such file (give a Jinja file or the template text)"
    )
    broken = tmp_path / "broken.jinja"
    broken.write_text("{{ raise_exception('no user messages here') }}")
    r = cli(
        "serve", "--model", "tiny-random", "--port", "0", "--threads", "1", "--chat-template", str(broken)
    )
    assert r.returncode == 1 and r.stderr.strip() == (
        f"turnrl serve: error: --chat-template {broken}: cannot render a user message "
        "(TemplateError: no user messages here)"
    )


def test_a_client_that_leaves_has_its_chat_stopped(child, client):
    def health():
        return httpx.get(child.url + "/health", headers=child.headers, timeout=2).json()

    before = health()
    # 64 rows x ~2000 tokens: minutes of work on this CPU; the client gives up after one second
    big = {"messages": HELLO, "n": 64, "max_tokens": 1900, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(child.url + "/v1/chat/completions", json=big, headers=child.headers, timeout=1.0)
    start = time.monotonic()
    assert chat(client, max_tokens=2, temperature=0).choices[0].finish_reason in ("stop", "length")
    assert time.monotonic() - start < 10  # it did not wait for the abandoned request
    after = health()
    assert sum(after[k] - before[k] for k in ("requests_dropped", "requests_aborted")) == 1, (before, after)


@pytest.mark.parametrize(
    "arguments", ['{"n": ' + "9" * 5000 + "}", "[" * 100_000], ids=["5000-digit integer", "100000 brackets"]
)
def test_tool_call_arguments_python_cannot_hold_are_a_400_not_a_500(child, arguments):
    """JSON with an integer past Python's digit limit (ValueError) or nesting past the recursion
    limit: refused as arguments that are not JSON are, in one line naming them."""
    messages = [
        *HELLO,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    r = httpx.post(
        child.url + "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 2},
        headers=child.headers,
        timeout=60,
    )
    assert r.status_code == 400 and r.json() == {
        "detail": "messages[2].tool_calls[0].function.arguments: JSON this server cannot read (an integer "
        "over 4300 digits, or nested too deep)"
    }, r.text
    assert httpx.get(child.url + "/health", headers=child.headers, timeout=2).status_code == 200
