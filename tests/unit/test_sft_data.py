"""SFT and preference rows: what is read, what is refused (one line naming the row or the setting),
and conversations over `data.max_length` dropped or cut, counted and said."""

import json
import logging
import re

import pytest

from turnrl.config import ConfigError, load_config
from turnrl.config.supervised_schema import RMConfig, RMDataConfig, SFTConfig, SFTDataConfig
from turnrl.data.dataset import DataError
from turnrl.models.loader import load_tokenizer
from turnrl.supervised.checks import check_rm, check_sft
from turnrl.supervised.rm_data import load_pairs
from turnrl.supervised.sft_data import load_conversations


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def chat(user: str, answer: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


def load(tok, files, **data):
    return load_conversations(files, tok, SFTDataConfig(**data), {tok.eos_token_id})


def test_a_row_without_an_assistant_turn_is_named(tok, tmp_path):
    f = write(tmp_path / "c.jsonl", [chat("a", "b"), {"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(
        DataError, match=r"c.jsonl row 1: the conversation has no assistant message \(roles: user\)"
    ):
        load(tok, [f])


def test_a_row_without_messages_names_the_setting(tok, tmp_path):
    f = write(tmp_path / "c.jsonl", [{"conversation": []}])
    with pytest.raises(
        DataError, match=r"row 0: row has no 'messages' field \(data.messages_key\); its fields: conversation"
    ):
        load(tok, [f])


def test_bad_tool_call_arguments_are_named(tok, tmp_path):
    call = {"function": {"name": "calc", "arguments": "{not json"}}
    row = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ]
    }
    with pytest.raises(DataError, match=r"row 0: message 1: the arguments of tool call 'calc' are not JSON"):
        load(tok, [write(tmp_path / "c.jsonl", [row])])


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        # an empty answer was trained on (1 token: the end of turn) when content was null or missing
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
            "message 1 ('assistant')",
        ),
        ([{"role": "user"}, {"role": "assistant", "content": "x"}], "message 0 ('user')"),
    ],
)
def test_a_message_without_content_is_named(tok, tmp_path, messages, said):
    with pytest.raises(DataError, match=rf"row 0: {re.escape(said)} needs 'content' \(text; an assistant may instead have tool_calls\)$"):  # fmt: skip
        load(tok, [write(tmp_path / "c.jsonl", [{"messages": messages}])])


def test_an_assistant_calling_a_tool_needs_no_content(tok, tmp_path):
    call = {"function": {"name": "calc", "arguments": "{}"}}
    row = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "4"},
            {"role": "assistant", "content": "4"},
        ]
    }
    assert len(load(tok, [write(tmp_path / "c.jsonl", [row])])) == 1


def test_overlong_conversations_are_dropped_and_counted(tok, tmp_path, caplog):
    rows = [chat("a", "b"), chat("long " * 100, "c"), chat("d", "e")]
    f = write(tmp_path / "c.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        kept = load(tok, [f], max_length=64)
    assert len(kept) == 2 and all(len(e.ids) <= 64 for e in kept)
    assert "dropped 1 of 3 conversations longer than data.max_length=64 tokens" in caplog.text
    assert "data.truncation=drop" in caplog.text


def test_right_truncation_cuts_and_keeps_the_assistant_tokens_that_fit(tok, tmp_path, caplog):
    rows = [chat("a", "b"), chat("q", "word " * 100), chat("long " * 100, "c")]
    f = write(tmp_path / "c.jsonl", rows)
    full = load(tok, [f], max_length=4096)
    with caplog.at_level(logging.WARNING):
        kept = load(tok, [f], max_length=64, truncation="right")
    # row 1 is cut inside its answer; row 2's answer starts past the limit: nothing left to learn
    assert len(kept) == 2
    assert kept[1].ids == full[1].ids[:64] and kept[1].mask == full[1].mask[:64] and sum(kept[1].mask) > 0
    assert "cut 2 of 3 conversations" in caplog.text and "1 of them kept no assistant token" in caplog.text


def test_all_dropped_is_an_error_naming_the_setting(tok, tmp_path):
    f = write(tmp_path / "c.jsonl", [chat("long " * 100, "c")] * 2)
    with pytest.raises(DataError) as err:
        load(tok, [f], max_length=16)
    msg = str(err.value)
    assert "every conversation in" in msg and "data.max_length=16" in msg and "2 dropped" in msg
    assert "data.truncation=right" in msg


def test_no_train_files_names_the_setting():
    with pytest.raises(ConfigError, match=r"'data.train_files' is empty"):
        load_config(None, ["model.path=tiny-random"], schema=SFTConfig, check=check_sft)
    with pytest.raises(ConfigError, match=r"'data.train_files' is empty: .*prompt"):
        load_config(None, [], schema=RMConfig, check=check_rm)


def test_rm_refuses_right_truncation():
    with pytest.raises(ConfigError, match=r"data\.truncation=drop"):
        load_config(
            None, ["data.train_files=[x.jsonl]", "data.truncation=right"], schema=RMConfig, check=check_rm
        )


@pytest.mark.parametrize("missing", ["chosen", "rejected"])
def test_a_preference_row_without_a_response_is_named(tok, tmp_path, missing):
    row = {"prompt": "Say hi.", "chosen": "hi", "rejected": "no"}
    del row[missing]
    f = write(tmp_path / "p.jsonl", [{"prompt": "a", "chosen": "b", "rejected": "c"}, row])
    with pytest.raises(
        DataError, match=rf"p.jsonl row 1: preference row has no '{missing}' field \(data.{missing}_key\)"
    ):
        load_pairs([f], tok, RMDataConfig())


def test_a_pair_is_the_rl_prompt_then_the_response_then_eos(tok, tmp_path):
    rows = [
        {"prompt": "Say hi.", "chosen": "hi", "rejected": {"role": "assistant", "content": "no"}},
        {"prompt": [{"role": "user", "content": "Say hi."}], "chosen": [{"role": "assistant", "content": "hi"}],
         "rejected": "no"},
    ]  # fmt: skip
    pairs = load_pairs([write(tmp_path / "p.jsonl", rows)], tok, RMDataConfig())
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Say hi."}], add_generation_prompt=True, tokenize=False
    )
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    for pair in pairs:
        assert pair.chosen == p + tok("hi", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert pair.rejected == p + tok("no", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
