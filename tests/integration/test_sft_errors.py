"""Bad input to `turnrl sft` / `turnrl rm` is one line on stderr naming the row or the setting, exit 2,
before any model loads or anything is written."""

import json
from pathlib import Path

import pytest

from tests.support.chat_templates import NO_TOOLS_TEMPLATE
from turnrl.cli import main


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def one_line(capsys, command: str, argv: list[str]) -> str:
    assert main([command, "model.path=tiny-random", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"turnrl {command}: ")
    return err[0]


CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
CALL = {"type": "function", "function": {"name": "calculator", "arguments": '{"expr": "1+1"}'}}


@pytest.mark.parametrize(
    ("rows", "extra", "expected"),
    [
        ([CHAT, {"messages": [{"role": "user", "content": "hi"}]}], [], "row 1: the conversation has no assistant message"),
        ([{"prompt": "hi"}], [], "row 0: row has no 'messages' field (data.messages_key)"),
        ([{"messages": [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "y"}]}],
         ["data.max_length=32"], "every conversation in"),
        ([CHAT, {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": None, "tool_calls": [CALL]}]}],
         [f"data.chat_template={NO_TOOLS_TEMPLATE}"], "row 1: the chat template does not render tool calls"),
    ],
    ids=["no-assistant-turn", "no-messages", "all-too-long", "template-without-tool-calls"],
)  # fmt: skip
def test_sft_bad_rows(tmp_path, capsys, rows, extra, expected):
    data = write(tmp_path / "chat.jsonl", rows)
    line = one_line(
        capsys, "sft", [f"data.train_files=[{data}]", f"trainer.default_local_dir={tmp_path / 'run'}", *extra]
    )
    assert expected in line and "chat.jsonl" in line
    assert not (tmp_path / "run").exists()


def test_sft_settings(tmp_path, capsys):
    assert "'data.train_files' is empty" in one_line(capsys, "sft", [])
    assert "did you mean 'data.max_length'" in one_line(capsys, "sft", ["data.max_len=8"])
    assert "data file not found: nope.jsonl" in one_line(capsys, "sft", ["data.train_files=[nope.jsonl]"])
    data = write(tmp_path / "chat.jsonl", [CHAT])
    line = one_line(
        capsys, "sft", [f"data.train_files=[{data}]", f"data.chat_template={tmp_path / 'no.jinja'}"]
    )
    assert "'data.chat_template': no such file" in line


def test_rm_bad_rows(tmp_path, capsys):
    good = {"prompt": "Say hi.", "chosen": "hi", "rejected": "no"}
    data = write(tmp_path / "pairs.jsonl", [good, {"prompt": "Say hi.", "chosen": "hi"}])
    line = one_line(capsys, "rm", [f"data.train_files=[{data}]"])
    assert "pairs.jsonl row 1: preference row has no 'rejected' field (data.rejected_key)" in line
    data = write(tmp_path / "pairs.jsonl", [{"prompt": "Say hi.", "chosen": 3, "rejected": "no"}])
    assert "row 0: 'chosen' (data.chosen_key) must be text" in one_line(
        capsys, "rm", [f"data.train_files=[{data}]"]
    )
    assert "'data.train_files' is empty" in one_line(capsys, "rm", [])
