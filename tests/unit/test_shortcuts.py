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


def test_gcd_parity_rule_on_real_gcd_rows():
    from turnrl.evaluate.shortcuts import gcd_parity
    from turnrl.rewards.registry import BUILTIN, resolve
    from turnrl.tasks import scorers

    pytest.importorskip("reasoning_gym")
    rows = get("reasoning_gym:gcd").rows("val", 1, size=50, val_size=20)
    for r in rows:  # hand check: 2 exactly when every number is even
        numbers = [
            int(n)
            for n in r["prompt"][-1]["content"].split(":")[1].replace(".", " ").replace(",", " ").split()
            if n.isdigit()
        ]
        assert gcd_parity(r) == ("2" if all(n % 2 == 0 for n in numbers) else "1")
    rules = rules_for(rows)
    assert "parity (2 if all even, else 1)" in rules
    scores = score_rules(rows, resolve(rows[0]["data_source"], table={**BUILTIN, **scorers()}), rules)
    right = sum(gcd_parity(r) == r["reward_model"]["ground_truth"] for r in rows) / len(rows)
    assert scores["parity (2 if all even, else 1)"]["acc"] == pytest.approx(right) and right > 0
    assert "parity (2 if all even, else 1)" not in rules_for(ROWS)  # other tasks: not offered


def test_by_gender_rule_on_hand_made_family_rows():
    pytest.importorskip("reasoning_gym")
    from reasoning_gym.graphs.family_relationships import FamilyRelationshipsConfig

    from turnrl.evaluate.shortcuts import gender

    male = set(FamilyRelationshipsConfig().male_names)
    assert {"James", "Peter"} <= male and "Karen" not in male

    def fam(q: str, answer: str) -> dict:
        return {**row(q, answer), "data_source": "reasoning_gym/family_relationships"}

    rows = [
        fam("How is James related to Karen? Provide the relationship in one word.", "son"),
        fam("What relation is Peter to James? Answer with a single word.", "father"),
        fam("What is James to Olivia? Answer only with the word that describes their relationship.", "son"),
        fam("How is Karen related to Peter? Provide the relationship in one word.", "wife"),
    ]
    assert [gender(r, male) for r in rows] == ["male", "male", "male", "female"]
    rules = rules_for(rows)
    # men: son twice, father once -> "son"; the one woman: "wife". Right on rows 1, 3 and 4: 3/4
    name = "by gender (wife if female, son if male)"
    assert name in rules and [rules[name](r) for r in rows] == ["son", "son", "son", "wife"]
    scorer = get("reasoning_gym:family_relationships").scorer
    assert score_rules(rows, scorer, {name: rules[name]})[name]["acc"] == pytest.approx(0.75)
    assert not any(k.startswith("by gender") for k in rules_for(ROWS))  # other tasks: not offered


def test_best_constant_on_search_rows_names_an_answer_the_scorer_takes():
    # a search row's ground truth is {"target": [name, aliases...]}: the constant must be a name,
    # not the dict's text (which no row accepts), and its score the fraction of rows it names
    rows = get("search").rows("val", 1)
    answer, share = best_constant(rows)
    assert not answer.startswith("{") and share > 0
    scores = score_rules(rows, get("search").scorer, rules_for(rows))
    assert scores[f"best constant ({answer})"]["acc"] >= share
