"""A model's (or a client's) tool-call JSON that Python refuses to hold, an integer past the digit
limit or nesting past the recursion limit, is a parse failure with a reason, never an exception."""

from turnrl.servers.chat.template import NOT_JSON, json_value
from turnrl.servers.chat.tool_calls import parse_call, parse_tool_calls


def test_deep_nesting_and_huge_integers_are_reasons_not_exceptions():
    assert parse_call("[" * 5000 + "]" * 5000) == "tool call is JSON too large to read (RecursionError)"
    huge = '{"name": "calc", "arguments": {"x": ' + "9" * 5000 + "}}"
    assert parse_call(huge) == "tool call is JSON too large to read (ValueError)"
    as_text = '{"name": "calc", "arguments": "' + "[" * 5000 + '"}'
    assert parse_call(as_text) == "arguments of 'calc' are not a JSON object"
    # in a whole message the call stays unparsed text, like any malformed call
    parsed = parse_tool_calls("<tool_call>" + "[" * 5000 + "</tool_call>")
    assert not parsed.tool_calls


def test_json_value_tells_what_it_cannot_hold():
    assert json_value('{"a": [1, 2]}') == {"a": [1, 2]}
    for text in ("not json", "[" * 100_000, "9" * 5000):
        assert json_value(text) is NOT_JSON
