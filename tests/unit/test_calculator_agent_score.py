"""The example OpenAI-API calculator agent's score: accuracy and format apart, and its two baselines
(the scripted policy and the echoed expression), on the calculator task's held-out rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from turnrl.tasks import calculator

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "calculator_openai.py"
spec = importlib.util.spec_from_file_location("calculator_openai", EXAMPLE)
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)


def agent_row(row: dict) -> dict:
    """A dataset row as the agent receives it (the ground truth at the top)."""
    return {**row, "ground_truth": row["reward_model"]["ground_truth"]}


@pytest.mark.parametrize(
    ("answer", "called_right", "calls", "expected"),
    [
        # the product alone, after a right call: right and formatted, reward 1
        (
            "47715616",
            True,
            1,
            {"reward": 1.0, "acc": 1.0, "formatted": 1.0, "called_right": 1.0, "calls": 1.0},
        ),
        (
            "47715616.",
            True,
            1,
            {"reward": 1.0, "acc": 1.0, "formatted": 1.0, "called_right": 1.0, "calls": 1.0},
        ),
        # right product in a sentence: accurate, not in the asked form
        (
            "The product is 47715616",
            True,
            1,
            {"reward": 1.0, "acc": 1.0, "formatted": 0.0, "called_right": 1.0, "calls": 1.0},
        ),
        # the echoed expression: last number 4987 is not the product; numbers, but not one number
        (
            "9568 * 4987",
            False,
            0,
            {"reward": 0.0, "acc": 0.0, "formatted": 0.0, "called_right": 0.0, "calls": 0.0},
        ),
        # a right call whose result was not copied: half credit
        (
            "47000000",
            True,
            2,
            {"reward": 0.5, "acc": 0.0, "formatted": 1.0, "called_right": 1.0, "calls": 2.0},
        ),
        ("", False, 3, {"reward": 0.0, "acc": 0.0, "formatted": 0.0, "called_right": 0.0, "calls": 3.0}),
    ],
)
def test_score_keeps_accuracy_and_format_apart(answer, called_right, calls, expected):
    assert agent.score(answer, called_right, calls, "47715616") == expected


def test_baselines_on_the_held_out_products():
    rows = [agent_row(r) for r in calculator.rows("val", 0)]
    assert len(rows) == 64
    scripted = [agent.scripted(r) for r in rows]
    echoed = [agent.echo(r) for r in rows]
    assert all(s["acc"] == s["formatted"] == s["called_right"] == s["reward"] == 1.0 for s in scripted)
    assert all(e["acc"] == e["formatted"] == e["reward"] == 0.0 for e in echoed)
