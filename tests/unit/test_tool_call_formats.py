"""Tool calls in each model family's own format (`servers.chat.tool_calls`), read from hand-written
model outputs: one and several calls, text before them, the XML form's values typed by the tool's
schema, malformed calls counted as unparsed (never an exception), and the format read off a template."""

from __future__ import annotations

import json
import re

import pytest

from turnrl.servers.chat.tool_calls import (
    FORMATS,
    EpisodeToolCalls,
    detect_format,
    parameter_schemas,
    parse_tool_calls,
    resolve_format,
    tool_call_metrics,
    tool_call_warning,
    typed_value,
    without_tokens,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "threshold": {"type": "number"},
                    "where": {"type": "object"},
                    "hours": {"type": "array", "items": {"type": "integer"}},
                    "note": {"type": ["string", "null"]},
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "search", "parameters": {"properties": {"q": {"type": "string"}}}},
    },
]
NAMES = {"get_weather", "search"}
SCHEMAS = parameter_schemas(TOOLS)


def calls_of(text: str, fmt: str, tools: set[str] | None = NAMES) -> list[tuple[str, dict]]:
    """(name, arguments) of each parsed call; asserts the message parsed whole."""
    parsed = parse_tool_calls(text, tools, fmt, SCHEMAS)
    assert parsed.unparsed == 0, parsed.reasons
    for call in parsed.tool_calls:
        assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]


# --- hermes ---------------------------------------------------------------------------------------


def test_hermes_single_several_and_text_before():
    one = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    assert calls_of(one, "hermes") == [("search", {"q": "x"})]
    two = f'Let me look.\n{one}\n<tool_call>{{"name": "get_weather", "arguments": {{"city": "Oslo"}}}}</tool_call>'
    parsed = parse_tool_calls(two, NAMES, "hermes")
    assert parsed.content == "Let me look."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["search", "get_weather"]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", c["id"]) for c in parsed.tool_calls)
    assert parse_tool_calls(one, NAMES, "hermes").content is None  # OpenAI: no text, content null


@pytest.mark.parametrize(
    "text, reason",
    [
        ('<tool_call>{"name": "search", "arguments": {"q": </tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>', "unknown tool 'delete_all'"),
        ('<tool_call>{"name": "search", "arguments": {}}', "<tool_call> without </tool_call>"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no 'name'"),
    ],
)
def test_hermes_malformed_is_unparsed_and_keeps_the_text(text, reason):
    parsed = parse_tool_calls(f"Sure. {text}", NAMES, "hermes")
    assert (parsed.tool_calls, parsed.unparsed, parsed.content) == ([], 1, f"Sure. {text}")
    assert reason in parsed.reasons[0]


def test_one_bad_call_leaves_every_call_unrun():
    good = '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>'
    parsed = parse_tool_calls(good + "<tool_call>{broken</tool_call>", NAMES, "hermes")
    assert parsed.tool_calls == [] and parsed.unparsed == 1


# --- qwen3_xml ------------------------------------------------------------------------------------

XML_CALL = (
    "<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nNew York\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n"
    "<parameter=metric>\nTrue\n</parameter>\n"
    "<parameter=threshold>\n2.5\n</parameter>\n"
    '<parameter=where>\n{"lat": 40.7, "lon": -74}\n</parameter>\n'
    "<parameter=hours>\n[6, 12]\n</parameter>\n"
    "<parameter=note>\nnull\n</parameter>\n"
    "<parameter=limit>\n10\n</parameter>\n"
    "</function>\n</tool_call>"
)


def test_xml_values_take_the_schema_type():
    assert calls_of(XML_CALL, "qwen3_xml") == [
        (
            "get_weather",
            {
                "city": "New York",
                "days": 3,
                "metric": True,
                "threshold": 2.5,
                "where": {"lat": 40.7, "lon": -74},
                "hours": [6, 12],
                "note": None,
                "limit": 10,
            },
        )
    ]


def test_xml_text_that_is_not_its_type_stays_text_and_strings_keep_their_lines():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n"
        "<parameter=metric>\nmaybe\n</parameter>\n<parameter=city>\n  two\nlines \n</parameter>\n"
        "<parameter=unknown>\n5\n</parameter>\n</function>\n</tool_call>"
    )
    assert calls_of(text, "qwen3_xml") == [
        ("get_weather", {"days": "three", "metric": "maybe", "city": "  two\nlines ", "unknown": "5"})
    ]


@pytest.mark.parametrize(
    "text, schema, value",
    [
        ("-7", {"type": "integer"}, -7),
        ("7.0", {"type": "integer"}, "7.0"),
        ("1e3", {"type": "number"}, 1000.0),
        ("NaN", {"type": "number"}, "NaN"),  # JSON cannot hold it: kept as the model wrote it
        ("FALSE", {"type": "boolean"}, False),
        ("None", {"type": "null"}, None),
        ("[1]", {"type": "object"}, "[1]"),
        ("[1]", {"items": {}}, [1]),
        ('{"a": 1}', {"properties": {}}, {"a": 1}),
        ("5", {"type": ["string", "integer"]}, "5"),  # the schema's order decides
        ("5", {"oneOf": [{"type": "integer"}, {"type": "string"}]}, 5),
        ("5", None, "5"),
        ("9" * 5000, {"type": "integer"}, "9" * 5000),  # past Python's digit limit: text
        ("[" * 5000, {"type": "array"}, "[" * 5000),
    ],
)
def test_typed_value(text, schema, value):
    assert typed_value(text, schema) == value


def test_xml_several_calls_text_before_and_json_inside_a_tool_call():
    search = "<tool_call>\n<function=search>\n<parameter=q>\nrain\n</parameter>\n</function>\n</tool_call>"
    hermes = '<tool_call>{"name": "search", "arguments": {"q": "sun"}}</tool_call>'
    parsed = parse_tool_calls(f"I will search twice.\n{search}\n{hermes}", NAMES, "qwen3_xml", SCHEMAS)
    assert parsed.content == "I will search twice." and parsed.unparsed == 0
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [
        {"q": "rain"},
        {"q": "sun"},
    ]
    # and a model of the hermes family writing the XML form is read all the same
    assert calls_of(search, "hermes") == [("search", {"q": "rain"})]


def test_an_xml_call_without_parameters():
    assert calls_of("<tool_call>\n<function=search>\n</function>\n</tool_call>", "qwen3_xml") == [
        ("search", {})
    ]


@pytest.mark.parametrize(
    "body, reason",
    [
        ("<function=search>\n<parameter=q>\nx\n</parameter>\n", "not <function=NAME>"),  # no </function>
        ("<function=search>\n<parameter=q>\nx\n</function>", "unclosed <parameter>"),
        ("<function=search>\nq = x\n<parameter=q>\nx\n</parameter>\n</function>", "text outside"),
        (
            "<function=search>\n<parameter=q>\nx\n</parameter>\n<parameter=q>\ny\n</parameter>\n</function>",
            "given twice",
        ),
        ("<function=search>\n<parameter=>\nx\n</parameter>\n</function>", "unnamed"),
        ("<function=wipe_disk>\n</function>", "unknown tool 'wipe_disk'"),
        ("<function=>\n</function>", "no function name"),
    ],
)
def test_xml_malformed_is_unparsed(body, reason):
    text = f"<tool_call>\n{body}\n</tool_call>"
    parsed = parse_tool_calls(text, NAMES, "qwen3_xml", SCHEMAS)
    assert (parsed.tool_calls, parsed.unparsed, parsed.content) == ([], 1, text)
    assert reason in parsed.reasons[0]


# --- llama3_json ----------------------------------------------------------------------------------


def test_llama_single_with_and_without_the_python_tag():
    call = '{"name": "search", "parameters": {"q": "x"}}'
    assert calls_of(call, "llama3_json") == [("search", {"q": "x"})]
    assert calls_of(f"<|python_tag|>{call}", "llama3_json") == [("search", {"q": "x"})]
    assert calls_of(f"<|python_tag|>{call}<|eom_id|>", "llama3_json") == [("search", {"q": "x"})]
    assert calls_of('{"name": "search", "arguments": {"q": "x"}}', "llama3_json") == [("search", {"q": "x"})]


def test_llama_several_calls_separated_by_semicolons_or_new_lines():
    a = '{"name": "search", "parameters": {"q": "a"}}'
    b = '{"name": "get_weather", "parameters": {"city": "Lima"}}'
    want = [("search", {"q": "a"}), ("get_weather", {"city": "Lima"})]
    assert calls_of(f"{a}; {b}", "llama3_json") == want
    assert calls_of(f"{a}\n{b}\n", "llama3_json") == want
    assert calls_of(f"<|python_tag|>{a};<|python_tag|>{b}", "llama3_json") == want


def test_llama_text_before_the_calls():
    call = '{"name": "search", "parameters": {"q": "x"}}'
    for text in (f"Let me search.\n{call}", f"Let me search.<|python_tag|>{call}"):
        parsed = parse_tool_calls(text, NAMES, "llama3_json")
        assert parsed.content == "Let me search." and len(parsed.tool_calls) == 1


def test_llama_answers_are_not_calls():
    for text in (
        "The capital of France is Paris.",
        'Here is the record:\n{"name": "Bob", "age": 3}',  # a name but no parameters: data, not a call
        'I would call {"name": "search", "parameters": {}} but I know the answer.',  # not at a line start
    ):
        parsed = parse_tool_calls(text, NAMES, "llama3_json")
        assert (parsed.tool_calls, parsed.unparsed, parsed.content) == ([], 0, text)


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"name": "search", "parameters": {"q": ', "not valid JSON"),
        ("<|python_tag|>print(1 + 1)", "without a JSON tool call"),
        ('<|python_tag|>{"name": "search", "parameters": [1]}', "must be a JSON object"),
        ('{"name": "rm", "parameters": {}}', "unknown tool 'rm'"),
        (
            '{"name": "search", "parameters": {"q": "a"}}; {"name": "search", "parameters": {',
            "not valid JSON",
        ),
    ],
)
def test_llama_malformed_is_unparsed(text, reason):
    parsed = parse_tool_calls(text, NAMES, "llama3_json")
    assert (parsed.tool_calls, parsed.content) == ([], text) and parsed.unparsed >= 1
    assert any(reason in r for r in parsed.reasons)


# --- mistral --------------------------------------------------------------------------------------


def test_mistral_json_list_single_several_and_ids():
    assert calls_of('[TOOL_CALLS][{"name": "search", "arguments": {"q": "x"}}]', "mistral") == [
        ("search", {"q": "x"})
    ]
    text = (
        'Checking.[TOOL_CALLS] [{"name": "search", "arguments": {"q": "x"}, "id": "a1b2c3d4e"}, '
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}]</s>'
    )
    parsed = parse_tool_calls(text, NAMES, "mistral")
    assert parsed.unparsed == 0 and [c["function"]["name"] for c in parsed.tool_calls] == [
        "search",
        "get_weather",
    ]
    assert parsed.tool_calls[0]["id"] == "a1b2c3d4e"  # the model's own id, which its template renders back
    # a new id as Mistral's templates want them: 9 letters and digits
    assert re.fullmatch(r"[A-Za-z0-9]{9}", parsed.tool_calls[1]["id"])
    # the end-of-message token after the calls is text outside them; a decode with special tokens kept strips it
    assert parsed.content == "Checking.</s>"
    assert without_tokens(parsed.content, ["</s>", "<s>"]) == "Checking."


def test_mistral_named_form_single_several_and_call_ids():
    assert calls_of('[TOOL_CALLS]search[ARGS]{"q": "x"}', "mistral") == [("search", {"q": "x"})]
    text = 'Two.[TOOL_CALLS]search[ARGS]{"q": "x"}[TOOL_CALLS]get_weather[CALL_ID]k9Zx01ab7[ARGS]{"city": "Oslo"}'
    parsed = parse_tool_calls(text, NAMES, "mistral")
    assert parsed.content == "Two." and parsed.unparsed == 0
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        ("search", {"q": "x"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert parsed.tool_calls[1]["id"] == "k9Zx01ab7"


@pytest.mark.parametrize(
    "text, reason",
    [
        ('[TOOL_CALLS][{"name": "search", "arguments": {"q": ', "not valid JSON"),
        ("[TOOL_CALLS] I think I should search", "neither a JSON list"),
        ('[TOOL_CALLS]search[ARGS]{"q": ', "not valid JSON"),
        ('[TOOL_CALLS]search[ARGS]["x"]', "must be a JSON object"),
        ('[TOOL_CALLS][{"name": "rm", "arguments": {}}]', "unknown tool 'rm'"),
        ("[TOOL_CALLS][1, 2]", "must be a JSON object"),
    ],
)
def test_mistral_malformed_is_unparsed(text, reason):
    parsed = parse_tool_calls(text, NAMES, "mistral")
    assert (parsed.tool_calls, parsed.content) == ([], text) and parsed.unparsed >= 1
    assert any(reason in r for r in parsed.reasons)


# --- every format ---------------------------------------------------------------------------------

ODD = [
    "",
    "plain text",
    "<tool_call>",
    "</tool_call><tool_call></tool_call>",
    "<tool_call><function=",
    "<tool_call>\n<function=search>\n<parameter=q>",
    "<|python_tag|>",
    "<|python_tag|>{",
    '{"name": ' + "[" * 5000,
    '{"name": "search", "parameters": {"q": ' + "9" * 5000 + "}}",
    "[TOOL_CALLS]",
    "[TOOL_CALLS][",
    "[TOOL_CALLS]x[ARGS]",
    "[TOOL_CALLS]x[CALL_ID][ARGS]{}[TOOL_CALLS]",
    "\x00\ud800 {}; ;;",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_text_makes_any_format_raise(fmt):
    for text in ODD:
        for tools in (None, NAMES):
            parsed = parse_tool_calls(text, tools, fmt, SCHEMAS)
            assert parsed.unparsed == len(parsed.reasons)
            assert parsed.tool_calls == [] or parsed.unparsed == 0


def test_other_formats_calls_are_text_in_a_format():
    hermes = '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>'
    for fmt in ("llama3_json", "mistral"):
        assert parse_tool_calls(hermes, NAMES, fmt).tool_calls == []
    assert parse_tool_calls('[TOOL_CALLS]search[ARGS]{"q": "x"}', NAMES, "hermes").tool_calls == []


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="one of hermes, qwen3_xml, llama3_json, mistral"):
        parse_tool_calls("x", None, "pythonic")


# --- the format, from the template ----------------------------------------------------------------


@pytest.mark.parametrize(
    "source, fmt",
    [
        ("{{ '<tool_call>\\n<function=' + name + '>' }}", "qwen3_xml"),  # holds <tool_call> too
        ("{{ '[TOOL_CALLS][' }}{{ calls | tojson }}", "mistral"),
        ("{{ '[TOOL_CALLS]' + name + '[ARGS]' }}", "mistral"),
        ("<|im_start|>{{ '<tool_call>\\n' }}", "hermes"),
        ("<|start_header_id|>{{ '<tool_call>' }}", "hermes"),  # Hermes on a Llama model: its tags decide
        ('<|start_header_id|>{{ \'{"name": "\' + name + \'", "parameters": \' }}', "llama3_json"),
        ("{{ '<|python_tag|>' + code }}", "llama3_json"),
        ("<|im_start|>{{ m.content }}<|im_end|>", "hermes"),  # says nothing: turnrl's own form
        ("", "hermes"),
        (None, "hermes"),
    ],
)
def test_detect_format(source, fmt):
    assert detect_format(source) == fmt


def test_resolve_format():
    assert resolve_format("auto", "[TOOL_CALLS]") == "mistral"
    assert resolve_format("llama3_json", "<tool_call>") == "llama3_json"  # a setting wins over the template
    with pytest.raises(ValueError, match="'xml': must be one of auto, hermes"):
        resolve_format("xml", "")


def test_parameter_schemas_skips_what_is_not_a_tool():
    tools = [{"type": "function", "function": {"name": "a"}}, "junk", {"function": {"parameters": {}}}]
    assert parameter_schemas(tools) == {"a": {}}
    assert parameter_schemas(None) == {}


# --- a step's metrics -----------------------------------------------------------------------------


def test_none_with_tools_counts_the_episodes_offered_tools_that_made_no_call():
    step = [EpisodeToolCalls(True, 2, 0), EpisodeToolCalls(True, 0, 1), EpisodeToolCalls(False, 0, 0)]
    assert tool_call_metrics(step) == {"agent/tool_calls/none_with_tools": 0.5}
    assert tool_call_metrics([EpisodeToolCalls(False, 0, 0)]) == {"agent/tool_calls/none_with_tools": 0.0}
    assert tool_call_metrics([]) == {"agent/tool_calls/none_with_tools": 0.0}


def test_a_warning_only_when_no_episode_offered_tools_made_a_call():
    assert tool_call_warning([EpisodeToolCalls(True, 1, 3), EpisodeToolCalls(True, 0, 0)], "hermes") is None
    assert tool_call_warning([EpisodeToolCalls(False, 0, 0)], "hermes") is None
    line = tool_call_warning([EpisodeToolCalls(True, 0, 2), EpisodeToolCalls(True, 0, 1)], "qwen3_xml")
    assert line is not None and "\n" not in line
    assert "none of 2 episode(s)" in line and "3 call(s) did not parse" in line and "qwen3_xml" in line
    line = tool_call_warning([EpisodeToolCalls(True, 0, 0)], "hermes")
    assert line is not None and "no call was written" in line and "rollout.agent.tool_call_format" in line


def test_without_tokens():
    assert without_tokens("</s>", ["</s>"]) is None
    assert without_tokens(None, ["</s>"]) is None
    assert without_tokens(" ok<|eot_id|>", ["<|eot_id|>", "<|eot_id|", ""]) == "ok"


def test_the_config_check_knows_every_format():
    from turnrl.config.checks import TOOL_CALL_FORMATS as CHECKED
    from turnrl.servers.chat.tool_calls import TOOL_CALL_FORMATS

    assert tuple(CHECKED) == tuple(TOOL_CALL_FORMATS)


def test_an_unknown_format_is_one_line_naming_the_key():
    from turnrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"rollout\.agent\.tool_call_format"):
        load_config(None, ["rollout.agent.entrypoint=a.py:run", "rollout.agent.tool_call_format=xml"])
