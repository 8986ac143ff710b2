"""`data.task=harbor:<folder>`: a user's task directories as a task, held out whole, refusals named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.harbor_runs import BUILTIN, task_folder
from turnrl.agent.harbor.spec import HarborTaskError
from turnrl.tasks import UnknownTask, get
from turnrl.tasks.harbor.folder import held_out_key

NAMES = (
    "numbers/mean_fix",
    "numbers/clamp",
    "strings/count_vowels",
    "collections/dedupe",
    "collections/flatten",
)


def folder(tmp_path: Path, names=NAMES) -> Path:
    return task_folder(tmp_path / "tasks", names)


def tasks_of(rows: list[dict]) -> list[str]:
    return [r["extra_info"]["task"] for r in rows]


def test_tasks_are_held_out_whole_by_their_names_hash(tmp_path):
    task = get(f"harbor:{folder(tmp_path)}")
    train, val = task.rows("train", 0), task.rows("val", 0)
    ranked = sorted((held_out_key(n.split("/")[1]), n.split("/")[1]) for n in NAMES)
    assert tasks_of(val) == [ranked[0][1]]  # 0.2 of 5: the one of lowest key
    assert sorted(tasks_of(train)) == sorted(n for _, n in ranked[1:])
    assert not set(tasks_of(train)) & set(tasks_of(val))
    assert {r["data_source"] for r in val} == {"turnrl/harbor/new_task"}
    # the split moves neither with the seed nor with a task added to the folder
    assert tasks_of(task.rows("val", 7)) == tasks_of(val)
    assert sorted(tasks_of(task.rows("train", 1))) == sorted(tasks_of(train))
    shutil.copytree(BUILTIN / "numbers" / "median_fix", tmp_path / "tasks" / "median_fix")
    if held_out_key("median_fix") > ranked[0][0]:
        assert tasks_of(task.rows("val", 0)) == tasks_of(val)


def test_val_dir_and_refusals(tmp_path, caplog):
    train_dir = folder(tmp_path, NAMES[:2])
    val_dir = tmp_path / "held"
    shutil.copytree(BUILTIN / "strings" / "count_vowels", val_dir / "count_vowels")
    bad = train_dir / "needs_numpy"
    shutil.copytree(BUILTIN / "numbers" / "clamp", bad)
    (bad / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nRUN pip install numpy\n")
    task = get(f"harbor:{train_dir}")
    with caplog.at_level("WARNING"):
        train = task.rows("train", 0, val_dir=str(val_dir))
    assert sorted(tasks_of(train)) == ["clamp", "mean_fix"]
    assert tasks_of(task.rows("val", 0, val_dir=str(val_dir))) == ["count_vowels"]
    assert "harbor task 'needs_numpy': environment/Dockerfile line 2: RUN pip install numpy" in caplog.text


def test_bad_folders_and_arguments_are_one_line(tmp_path):
    with pytest.raises(UnknownTask, match="is not a folder of Harbor task directories"):
        get(f"harbor:{tmp_path / 'nowhere'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HarborTaskError, match="no task to train on"):
        get(f"harbor:{tmp_path / 'empty'}").rows("train", 0)
    with pytest.raises(HarborTaskError, match=r"val_share must be in \[0, 1\), got 1.5"):
        get(f"harbor:{folder(tmp_path)}").rows("val", 0, val_share=1.5)
