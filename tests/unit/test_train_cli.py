"""`turnrl train` start-up: bad input (TurnrlInputError) is one line and exit 2; a bug keeps its traceback."""

import sys
import types

import pytest

from turnrl.agent.tools.base import ToolError
from turnrl.cli import main
from turnrl.data.dataset import DataError
from turnrl.models.loader import ModelError
from turnrl.rewards.registry import RewardError
from turnrl.servers.retriever.errors import RetrieverUnavailable
from turnrl.servers.sandbox import SandboxUnavailable


def fake_trainer(monkeypatch, error: Exception) -> None:
    """`turnrl train` imports its Trainer at run time: hand it one whose start-up raises `error`."""

    class Trainer:
        def __init__(self, cfg):
            raise error

    module = types.ModuleType("turnrl.trainer.ppo")
    module.Trainer = Trainer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "turnrl.trainer.ppo", module)


@pytest.mark.parametrize(
    "error",
    [
        ModelError("model path '/no/such' does not exist"),
        DataError("data file not found: nope.jsonl"),
        RewardError("no reward function for data_source 'gsm9k'"),
        ToolError("rollout.multi_turn.python.url: sandbox server at http://x is not usable"),
        RetrieverUnavailable("retriever at http://y did not answer"),
        SandboxUnavailable("sandbox server did not start"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_bad_input_at_start_up_is_one_line(monkeypatch, capsys, error):
    fake_trainer(monkeypatch, error)
    assert main(["train"]) == 2
    assert capsys.readouterr().err == f"turnrl train: {error}\n"


def test_bad_config_is_one_line(capsys):
    assert main(["train", "rollout.top_p=2"]) == 2
    assert capsys.readouterr().err == "turnrl train: 'rollout.top_p' must be in (0, 1], got 2.0\n"


@pytest.mark.parametrize(
    "error",
    [ValueError("a bug: shapes (3,) and (4,)"), RuntimeError("CUDA error"), KeyError("input_ids")],
    ids=lambda e: type(e).__name__,
)
def test_a_bug_at_start_up_keeps_its_traceback(monkeypatch, capsys, error):
    fake_trainer(monkeypatch, error)
    with pytest.raises(type(error)) as raised:
        main(["train"])
    assert raised.value is error
    assert raised.traceback[-1].name == "__init__"  # the traceback still reaches the raising frame
    assert "turnrl train:" not in capsys.readouterr().err
