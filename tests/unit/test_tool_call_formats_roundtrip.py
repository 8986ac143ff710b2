"""Each tool-call format round-trips through a chat template of its family (tests/fixtures/templates):
the format is read off the template, the calls a model wrote in it parse into OpenAI `tool_calls`,
and rendering that assistant message back with the template gives the model's text and tokens
again, which is what lets the agent gateway keep recording an episode across calls. The other way
too: an OpenAI message rendered by the template parses back to the same calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnrl.models.loader import load_tokenizer
from turnrl.servers.chat.template import ChatTemplate
from turnrl.servers.chat.tool_calls import parameter_schemas, parse_tool_calls

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast of a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "hours": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "search", "parameters": {"properties": {"q": {"type": "string"}}}},
    },
]
USER = [{"role": "user", "content": "Weather in Oslo and Lima?"}]

# (template, the format it writes, the end it writes after an assistant message, what a model wrote)
CASES = [
    (
        "hermes",
        "hermes",
        "<|im_end|>\n",
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": {"q": "Lima weather"}}\n</tool_call>',
    ),
    (
        "qwen3_xml",
        "qwen3_xml",
        "<|im_end|>\n",
        "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
        "<parameter=hours>\n[6, 18]\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=search>\n<parameter=q>\nLima\nweather\n</parameter>\n</function>\n</tool_call>",
    ),
    (
        "llama3_json",
        "llama3_json",
        "<|eot_id|>",
        'Let me check.\n{"name": "get_weather", "parameters": {"city": "Oslo", "days": 2}}; '
        '{"name": "search", "parameters": {"q": "Lima weather"}}',
    ),
    (
        "mistral_list",
        "mistral",
        "</s>",
        'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}, "id": "Ab3dE6gH9"}, '
        '{"name": "search", "arguments": {"q": "Lima weather"}, "id": "x1y2z3w4v"}]',
    ),
    (
        "mistral_named",
        "mistral",
        "</s>",
        'Let me check.[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo", "days": 2}[TOOL_CALLS]search[ARGS]{"q": "Lima weather"}',
    ),
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def template_of(tok, name: str) -> ChatTemplate:
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return ChatTemplate(tok)


@pytest.mark.parametrize("name, fmt, end, written", CASES, ids=[c[0] for c in CASES])
def test_the_model_text_parses_and_renders_back_to_itself(tok, name, fmt, end, written):
    template = template_of(tok, name)
    assert template.tool_call_format() == fmt  # auto: read off the template's source
    parsed = parse_tool_calls(written, {"get_weather", "search"}, fmt, parameter_schemas(TOOLS))
    assert parsed.unparsed == 0, parsed.reasons
    assert parsed.content == "Let me check."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["get_weather", "search"]
    message = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.tool_calls}
    prompt = template.render(USER, TOOLS)
    whole = template.render([*USER, message], TOOLS, add_generation_prompt=False)
    assert whole == prompt + written + end
    # the tokens too: the assistant message as rendered is the model's tokens, then the template's end
    written_ids = template.encode(written)
    assert template.encode(whole[len(prompt) :])[: len(written_ids)] == written_ids


def test_xml_values_parse_into_their_schema_types(tok):
    _, fmt, _, written = CASES[1]
    parsed = parse_tool_calls(written, None, fmt, parameter_schemas(TOOLS))
    args = [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls]
    assert args == [{"city": "Oslo", "days": 2, "metric": True, "hours": [6, 18]}, {"q": "Lima\nweather"}]


@pytest.mark.parametrize("name, fmt, end, _", CASES, ids=[c[0] for c in CASES])
def test_a_rendered_openai_message_parses_back_to_its_calls(tok, name, fmt, end, _):
    template = template_of(tok, name)
    calls = [
        {"city": "Oslo", "days": 2, "metric": False, "hours": [1, 2]},
        {"q": 'a "quoted" query with ; and \n and ünïcode'},
    ]
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": f"abcdefgh{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(zip(["get_weather", "search"], calls, strict=True))
        ],
    }
    prompt = template.render(USER, TOOLS)
    whole = template.render([*USER, message], TOOLS, add_generation_prompt=False)
    assert whole.startswith(prompt) and whole.endswith(end)
    written = whole[len(prompt) : len(whole) - len(end)]
    parsed = parse_tool_calls(written, {"get_weather", "search"}, fmt, parameter_schemas(TOOLS))
    assert parsed.unparsed == 0 and parsed.content is None
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == calls
    # parsed again, the message renders to the same text
    again = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.tool_calls}
    if name == "mistral_list":  # the only template here that renders call ids
        assert [c["id"] for c in parsed.tool_calls] == ["abcdefgh0", "abcdefgh1"]
    assert template.render([*USER, again], TOOLS, add_generation_prompt=False) == whole


def test_a_tokenizers_named_templates_are_read_together(tok):
    tok.chat_template = {"default": "{{ messages }}", "tool_use": "{{ '[TOOL_CALLS]' }}"}
    template = ChatTemplate(tok)
    assert "[TOOL_CALLS]" in template.source and template.tool_call_format() == "mistral"
    assert template.tool_call_format("hermes") == "hermes"
    with pytest.raises(ValueError, match="must be one of"):
        template.tool_call_format("json")
