"""The code task's rows: held-out families, balanced tests, task arguments, the reward formula, and
prompts that fit the recipe (no sandbox here: tests/integration/test_code_task.py runs programs)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from turnrl.models.loader import load_tokenizer
from turnrl.rewards.code import CaseRun, same_output
from turnrl.tasks import code
from turnrl.tasks.args import TaskArgError
from turnrl.tasks.code.problems import HELD_OUT_PROBLEMS, PROBLEMS, TRAIN_FAMILIES, VAL_FAMILIES

RECIPE = Path(code.__file__).parents[2] / "recipes" / "code_agent.yaml"
SEEDS = (0, 1)


def all_rows(seed: int) -> list[dict]:
    return code.rows("train", seed) + code.rows("val", seed)


def test_validation_families_and_problems_never_appear_in_training():
    assert len(PROBLEMS) >= 30 and len({p.name for p in PROBLEMS}) == len(PROBLEMS)
    assert not set(TRAIN_FAMILIES) & set(VAL_FAMILIES)
    for seed in SEEDS:
        train, val = code.rows("train", seed), code.rows("val", seed)
        assert {r["extra_info"]["family"] for r in train} == set(TRAIN_FAMILIES)
        assert {r["data_source"] for r in train} == {code.DATA_SOURCE}
        assert not {r["extra_info"]["problem"] for r in train} & {r["extra_info"]["problem"] for r in val}
        # new problems: one per training family; new families: every problem of the held-out ones
        new_problem = [r for r in val if r["data_source"] == "turnrl/code/new_problem"]
        new_family = [r for r in val if r["data_source"] == "turnrl/code/new_family"]
        assert len(new_problem) + len(new_family) == len(val)
        assert {r["extra_info"]["problem"] for r in new_problem} == set(HELD_OUT_PROBLEMS)
        assert sorted(r["extra_info"]["family"] for r in new_problem[:5]) == sorted(TRAIN_FAMILIES)
        assert {r["extra_info"]["family"] for r in new_family} == set(VAL_FAMILIES)
        assert {r["extra_info"]["problem"] for r in val[:13]} == {r["extra_info"]["problem"] for r in val}
        # every held-out problem is asked equally often
        assert set(Counter(r["extra_info"]["problem"] for r in val).values()) == {code.VAL_ROWS_PER_PROBLEM}


@pytest.mark.parametrize("seed", SEEDS)
def test_no_constant_output_passes_more_than_a_tenth_of_any_rows_tests(seed):
    for row in all_rows(seed):
        truth = row["reward_model"]["ground_truth"]
        outputs = truth["outputs"]
        assert len(outputs) == len(truth["inputs"]) >= 10
        for candidate in set(outputs):  # the best constant program prints one of the expected outputs
            passed = sum(same_output(candidate, o) for o in outputs)
            assert passed / len(outputs) <= 0.1, (row["extra_info"], candidate)
        # nor does echoing the shown example's output pass anything
        problem = {p.name: p for p in PROBLEMS}[row["extra_info"]["problem"]]
        shown = problem.solve(row["extra_info"]["example_input"])
        assert not any(same_output(shown, o) for o in outputs), row["extra_info"]
        assert f"Example output:\n{shown}\n" in row["prompt"][0]["content"]


def test_no_problem_has_a_yes_no_answer():
    answers = {o.strip() for r in all_rows(0) for o in r["reward_model"]["ground_truth"]["outputs"]}
    assert not answers & {"YES", "NO", "Yes", "No", "True", "False"}


def test_rows_are_pure_and_a_smaller_n_train_is_a_prefix():
    assert code.rows("train", 2) == code.rows("train", 2)
    assert code.rows("train", 2, n_train=40) == code.rows("train", 2)[:40]
    assert code.rows("val", 2, n_train=40)[0]["extra_info"]["index"] == 40  # indexed after training


def test_the_worked_example_is_on_by_default_and_can_be_turned_off():
    with_it, without = code.rows("val", 0)[0], code.rows("val", 0, example=False)[0]
    text, plain = with_it["prompt"][0]["content"], without["prompt"][0]["content"]
    # one complete exchange for another problem: a test run, its output, the final program
    assert text.count("<code>\n") == 1 and plain.count("<code>") == 1  # the instructions name the tag
    assert "<observation>49</observation>" in text
    assert "```python\nn = int(input())\nprint(n * n)\n```\n</answer>" in text
    assert "Now your problem." in text and "n * n" not in plain
    assert with_it["reward_model"] == without["reward_model"]  # the same tests either way


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"exmaple": False}, "takes no argument 'exmaple'; its arguments: example, n_train"),
        ({"example": "no"}, "'example' must be true or false"),
        ({"n_train": 0}, "'n_train' must be a positive integer"),
    ],
)
def test_bad_task_arguments_are_named(args, message):
    with pytest.raises(TaskArgError, match=message):
        code.rows("train", 0, **args)


def test_the_reward_formula_worked_by_hand():
    ok, wrong, crash = CaseRun(True, True), CaseRun(True, False), CaseRun(False, False)
    # 10 tests, exits 0 on all, right on 3: 0.1 * 1 + 0.9 * 0.3
    graded = code.score([ok] * 3 + [wrong] * 7)
    assert graded["score"] == pytest.approx(0.37)
    assert (graded["acc"], graded["pass_rate"], graded["ran"], graded["formatted"]) == (0.3, 0.3, 1.0, 1.0)
    assert code.score([wrong] * 10)["score"] == pytest.approx(0.1)  # runs, never right
    assert code.score([crash] * 10)["score"] == 0.0  # never runs
    assert code.score([crash] * 9 + [wrong])["ran"] == 1.0  # one clean run is enough
    assert code.score([ok] * 10)["score"] == pytest.approx(1.0)


def test_an_answer_without_a_program_scores_zero_and_unformatted():
    truth = code.rows("val", 0)[0]["reward_model"]["ground_truth"]
    got = code.compute_score(code.DATA_SOURCE, "I do not know.", truth)  # never reaches a sandbox
    assert got == {"score": 0.0, "acc": 0.0, "formatted": 0.0, "pass_rate": 0.0, "ran": 0.0}


def test_prompts_fit_the_recipe():
    limit = yaml.safe_load(RECIPE.read_text())["data"]["max_prompt_length"]
    tok = load_tokenizer("tiny-random")
    texts = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in all_rows(0)
    ]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert min(lengths) > 200 and max(lengths) <= limit, (min(lengths), max(lengths))
