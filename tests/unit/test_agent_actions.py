import copy

import pytest

from turnrl.agent.actions import JsonActions, XmlActions
from turnrl.agent.chat_template import ToolMessages
from turnrl.agent.observation import ObservationBuilder
from turnrl.models.loader import load_tokenizer

XML = XmlActions({"search": ("search", "query"), "code": ("python", "code")}, "answer")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def test_xml_actions():
    a = XML.parse("<think>need facts</think>\n<search> who founded Lina Foundry </search>")
    assert (
        a.kind == "tool"
        and a.calls[0].name == "search"
        and a.calls[0].arguments == {"query": "who founded Lina Foundry"}
    )
    a = XML.parse("<code>\nprint(1)\n</code>")
    assert a.calls[0].name == "python" and a.calls[0].arguments == {"code": "print(1)"}
    assert XML.parse("so <answer> Paris </answer>").answer == "Paris"
    assert XML.parse("I think it is Paris.").kind == "none"
    bad = XML.parse("oops </search>")
    assert bad.kind == "invalid" and "without <search>" in bad.reason
    assert XML.parse("<search>  </search>").kind == "invalid"
    assert XML.parse("<search>a</code>").kind == "invalid"  # mismatched tags are not an action
    assert sorted(XML.stops) == ["</answer>", "</code>", "</search>"]
    with pytest.raises(ValueError, match="also a tool tag"):
        XmlActions({"answer": ("x", "y")}, "answer")


def test_json_tool_calls():
    p = JsonActions({"search", "calculator"})
    a = p.parse(
        '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call>'
    )
    assert a.kind == "tool" and [c.name for c in a.calls] == ["search", "calculator"]
    assert a.calls[1].arguments == {"expression": "1+1"}  # arguments sent as a JSON string are accepted
    assert p.parse("The answer is 4.").kind == "answer"
    for text, reason in [
        ('<tool_call>{"name": "search", "arguments": {"query": "x"}</tool_call>', "not valid JSON"),
        ('<tool_call>["search"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no 'name'"),
        ('<tool_call>{"name": "shell", "arguments": {}}</tool_call>', "unknown tool 'shell'"),
        ('<tool_call>{"name": "search", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "search"', "without </tool_call>"),
    ]:
        action = p.parse(text)
        assert action.kind == "invalid" and reason in action.reason, (text, action)


def test_observation_cut_is_exact_and_keeps_closing_tag(tok):
    b = ObservationBuilder(tok, max_obs_length=8, marker="...[truncated]", invalid_text="bad {tool_tag}")
    long = " ".join(["word"] * 50)
    obs = b.xml("information", long)
    text = tok.decode(obs.ids)
    assert (
        obs.cut == 1
        and text.startswith("\n\n<information>")
        and text.endswith("...[truncated]</information>\n\n")
    )
    body = len(obs.ids) - len(b.encode("\n\n<information>")) - len(b.encode("</information>\n\n"))
    assert body == 8  # the tool output, marker included, is exactly max_obs_length tokens
    short = b.xml("information", "  Doc 1 b ")
    assert short.cut == 0 and tok.decode(short.ids) == "\n\n<information>Doc 1 b</information>\n\n"
    assert tok.decode(b.invalid("x", tool_tag="search").ids) == "bad search"
    with pytest.raises(ValueError, match="not shorter than max_obs_length"):
        ObservationBuilder(tok, 3, "...[truncated]", "")


def test_chat_template_tool_messages_are_a_suffix(tok):
    t = ToolMessages.probe(tok)
    assert isinstance(t, ToolMessages), t
    # the model ended its message with <|im_end|>; the template adds only what follows it
    assert t.render(["42"], "<|im_end|>") == "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"
    assert t.render(["a", "b"], "").startswith(
        "<|im_end|>\n<|im_start|>tool\na<|im_end|>\n<|im_start|>tool\nb"
    )
    b = ObservationBuilder(tok, 4, "~", "", template=t)
    obs = b.tool_messages(["one two three four five six"], "<|im_end|>")
    assert obs.cut == 1 and "~<|im_end|>" in tok.decode(obs.ids)


def test_non_prefix_preserving_template_is_detected(tok):
    # a template that rewrites history (drops earlier assistant text once a tool message follows)
    rewriting = copy.copy(tok)
    rewriting.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}<a>{% else %}"
        "<{{ m['role'] }}>{{ m['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    reason = ToolMessages.probe(rewriting)
    assert isinstance(reason, str) and "prefix-preserving" in reason
    none = copy.copy(tok)
    none.chat_template = None
    assert ToolMessages.probe(none) == "the tokenizer has no chat template"


def test_appended_text_is_the_templates_difference_after_the_models_own_end():
    """The one template-delta rule of every episode path (hand-worked, ChatML, end "<|im_end|>\\n")."""
    from turnrl.agent.chat_template import appended_text

    before = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n"
    new = "<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n"
    end = "<|im_end|>\n"
    # the model wrote its <|im_end|> token: only the newline after it is added
    assert appended_text(before, before + new, end, "<|im_end|>") == "\n" + new
    # it stopped without one (a length cut): the whole end is added
    assert appended_text(before, before + new, end, "") == end + new
    # an EOS text the end does not start with (another stop token) adds the whole end too
    assert appended_text(before, before + new, end, "</s>") == end + new
    # a template that rewrites what came before gives nothing to append
    assert appended_text(before, before.replace("hi", "") + new, end, "<|im_end|>") is None
