"""Held-out validation for the built-in Harbor tasks: no validation task's files, instruction or
solution appear in any training row or demonstration, and the split is the documented one."""

from __future__ import annotations

import json

import pytest

from turnrl.agent.harbor.demos import solved_files
from turnrl.tasks.harbor import HELD_OUT_TASKS, VAL_FAMILIES, builtin_tasks, demonstrations, rows
from turnrl.tasks.harbor.builtin import split_of

SHARED = {"/tests/test.sh"}
"""Files every built-in task has alike (the verifier script): infrastructure, not a task's content."""


def task_texts(task) -> list[str]:
    """What a held-out task is: its instruction, its starting, test and solution files, and each
    substantial line of its solved code."""
    texts = [task.instruction.strip()]
    texts += [f.content.decode() for f in (*task.files, *task.tests, *task.solution) if f.path not in SHARED]
    for text in solved_files(task).values():
        texts += [line.strip() for line in text.splitlines() if len(line.strip()) >= 40]
    return texts


@pytest.fixture(scope="module")
def demos_and_report():
    return demonstrations(None, 0)


def test_no_held_out_task_appears_in_training_rows_or_demonstrations(demos_and_report):
    train = rows("train", 0, n_train=60)
    demos, report = demos_and_report
    training_text = "\n".join(json.dumps(r) for r in train) + "\n".join(
        json.dumps(d["messages"]) for d in demos
    )
    held = [(key, task) for key, task in builtin_tasks() if split_of(key) != "train"]
    assert len(held) == len(HELD_OUT_TASKS) + sum(
        key.split("/")[0] in VAL_FAMILIES for key, _ in builtin_tasks()
    )
    for key, task in held:
        for text in task_texts(task):
            assert json.dumps(text)[1:-1] not in training_text, (key, text[:80])
    trained = next(task for key, task in builtin_tasks() if split_of(key) == "train")
    assert all(json.dumps(text)[1:-1] in training_text for text in task_texts(trained))  # the check can fail
    held_names = {task.name for _, task in held}
    assert not held_names & {r["extra_info"]["task"] for r in train + demos}
    assert not held_names & set(report)
    # no row of a held-out family is trained on, and each family's held-out tasks are validated
    assert not {r["extra_info"]["family"] for r in train} & set(VAL_FAMILIES)
    val = rows("val", 0)
    assert {r["extra_info"]["task"] for r in val} == held_names
    assert all(r["extra_info"]["split"] == "test" for r in val)


def test_every_training_task_is_demonstrated_and_the_split_is_fixed(demos_and_report):
    demos, report = demos_and_report
    training = {task.name for key, task in builtin_tasks() if split_of(key) == "train"}
    assert set(report) == training and len(demos) == len(training)
    for row in demos:
        assert row["messages"][0] == row["prompt"][0] and row["messages"][-1]["role"] == "assistant"
        check = [m for m in row["messages"] if m["role"] == "tool"][-1]["content"]
        assert "OK" in check, (row["extra_info"]["task"], check)
    # the held-out tasks do not move with the seed
    assert {r["extra_info"]["task"] for r in rows("val", 5)} == {
        r["extra_info"]["task"] for r in rows("val", 0)
    }
