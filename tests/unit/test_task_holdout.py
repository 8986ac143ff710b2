"""Held-out validation for the arithmetic tasks, and accuracy apart from format.

A validation problem never appears in training, neither asked nor shown as a worked example
(`extra_info.problem` names it, both orders of a sum or product being one problem); a scorer's `acc`
and `formatted` become `accuracy` and `format_rate`, split by data source."""

from __future__ import annotations

import re

import pytest

from turnrl.rewards.scorer import rates_by_source
from turnrl.tasks import addition, calculator


def unordered(problem: str, op: str) -> frozenset[int]:
    return frozenset(map(int, problem.split(op)))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_addition_validates_on_problems_training_never_asks_or_shows(seed):
    train, val = addition.rows("train", seed), addition.rows("val", seed)
    val_problems = {unordered(r["extra_info"]["problem"], "+") for r in val}
    assert len(val) == 40 and len({r["extra_info"]["problem"] for r in val}) == 40
    for row in train:
        assert unordered(row["extra_info"]["problem"], "+") not in val_problems
    for row in train + val:  # the worked example is a training problem, in training and validation
        shown = re.fullmatch(r"Compute (\d) \+ (\d)\. .*", row["prompt"][0]["content"])
        assert shown is not None
        assert frozenset(map(int, shown.groups())) not in val_problems
        a, b = row["extra_info"]["a"], row["extra_info"]["b"]
        assert row["extra_info"]["problem"] == f"{a}+{b}" and row["reward_model"]["ground_truth"] == str(
            a + b
        )
    # the held-out problems are fixed: every seed validates on the same 40
    assert val_problems == {unordered(r["extra_info"]["problem"], "+") for r in addition.rows("val", 99)}


def test_addition_holds_out_both_orders_and_covers_the_sums():
    train_problems, val_problems = addition.split_problems()
    assert len(train_problems) == 60 and len(val_problems) == 40
    assert all((b, a) in val_problems for a, b in val_problems)
    assert not set(train_problems) & set(val_problems)
    sums = {a + b for a, b in val_problems}
    assert min(sums) <= 3 and max(sums) >= 14  # small and large sums, not one corner of the table


def test_calculator_validation_products_never_appear_in_training():
    train, val = calculator.rows("train", 0), calculator.rows("val", 0)
    seen = {r["extra_info"][k] for r in train for k in ("problem", "example")}
    assert len(val) == 64
    assert all(r["extra_info"]["problem"] not in seen for r in val)
    row = val[0]
    a, b = row["extra_info"]["a"], row["extra_info"]["b"]
    assert row["extra_info"]["problem"] == f"{min(a, b)}*{max(a, b)}"
    assert calculator.problem_key(739, 4821) == calculator.problem_key(4821, 739) == "739*4821"


def test_the_scorers_report_accuracy_apart_from_format():
    row = addition.rows("val", 0)[0]
    truth, info = row["reward_model"]["ground_truth"], row["extra_info"]
    wrong = str(int(truth) + 1 if int(truth) + 1 != info["example"] else int(truth) + 2)
    right = addition.compute_score(addition.DATA_SOURCE, f"<answer>{truth}</answer>", truth, info)
    tagged_wrong = addition.compute_score(addition.DATA_SOURCE, f"<answer>{wrong}</answer>", truth, info)
    untagged = addition.compute_score(addition.DATA_SOURCE, f"the sum is {truth}", truth, info)
    assert (right["acc"], right["formatted"]) == (1.0, 1.0)
    assert (tagged_wrong["acc"], tagged_wrong["formatted"], tagged_wrong["score"]) == (0.0, 1.0, 0.1)
    assert (untagged["acc"], untagged["formatted"], untagged["score"]) == (0.0, 0.0, 0.0)


def test_rates_split_by_source_only_when_every_row_reported():
    sources = ["a", "b", "a"]
    both = rates_by_source(sources, {"acc": [1.0, 0.0, 1.0], "formatted": [1.0, 1.0, 0.0], "other": [5.0]})
    assert both == {"accuracy": {"a": [1.0, 1.0], "b": [0.0]}, "format_rate": {"a": [1.0, 0.0], "b": [1.0]}}
    # one row's scorer failed: its value is missing, so no value can be put to a source
    assert rates_by_source(sources, {"acc": [1.0, 0.0]}) == {"accuracy": {"": [1.0, 0.0]}}
    assert rates_by_source(sources, {"score_only": [1.0, 1.0, 1.0]}) == {}
