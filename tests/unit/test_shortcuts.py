"""Shortcut baselines (turnrl/evaluate/shortcuts.py) on hand-made rows, scored by real scorers."""

import pytest

from turnrl.evaluate.shortcuts import always_add, best_constant, rules_for, score_rules
from turnrl.tasks import get


def row(question: str, answer: str) -> dict:
    return {
        "data_source": "turnrl/addition",
        "prompt": [
            {"role": "user", "content": "3 + 4 = <answer>7</answer>"},
            {"role": "user", "content": question},
        ],
        "reward_model": {"ground_truth": answer},
        "extra_info": {},
    }


ROWS = [
    row("What is 7 - 3 =", "4"),
    row("What is 2 - 5 =", "-3"),
    row("1 + 3 =", "4"),
    row("9 - 9 + 2 =", "2"),
]


def test_always_add_reads_every_minus_as_a_plus():
    assert [always_add(r) for r in ROWS] == ["10", "7", "4", "20"]
    assert always_add(row("Who founded Velmora?", "x")) is None


def test_best_constant_is_the_most_common_answer():
    assert best_constant(ROWS) == ("4", 0.5)


def test_each_rule_scored_by_the_tasks_scorer():
    # truths 4, -3, 4, 2: always add is right on row 3 only (1/4); dropping the sign on 3 of 4
    # (not -3); the never-negative ceiling answers -3's row with the best non-negative constant 4
    # (wrong): 3/4; the constant 4: 2/4
    scores = score_rules(ROWS, get("addition").scorer, rules_for(ROWS))
    assert scores["best constant (4)"]["acc"] == pytest.approx(0.5)
    assert scores["always add"]["acc"] == pytest.approx(0.25)
    assert scores["drop the sign"]["acc"] == pytest.approx(0.75)
    assert scores["never negative (ceiling)"]["acc"] == pytest.approx(0.75)
    assert all(s["formatted"] == 1.0 for s in scores.values())


def test_arithmetic_rules_only_where_they_differ_from_the_truth():
    positive = [row("1 + 3 =", "4"), row("2 + 2 =", "4")]
    assert list(rules_for(positive)) == ["best constant (4)"]
