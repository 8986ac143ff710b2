"""`turnrl data harbor_sft`: scripted episodes of the built-in Harbor tasks' training split only, each
the task's row with its messages and tools, for the `harbor_sft` recipe, which trains on them."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from turnrl.cli import main
from turnrl.tasks.harbor.builtin import train_tasks, val_tasks


def generate(tmp_path, capsys, *flags: str) -> tuple[list[dict], str]:
    out = tmp_path / "harbor_sft"
    assert main(["data", "harbor_sft", "--out", str(out), *flags]) == 0
    assert [p.name for p in out.iterdir()] == ["train.jsonl"]  # no temporary file left behind
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    return rows, capsys.readouterr().out


def test_training_tasks_only_each_a_whole_episode(tmp_path, capsys):
    rows, said = generate(tmp_path, capsys, "--seed", "1", "--n", "60")
    trained = {t.name for _, t in train_tasks()}
    held_out = {t.name for _, t in val_tasks()}
    tasks = Counter(r["extra_info"]["task"] for r in rows)
    assert set(tasks) == trained and set(tasks.values()) == {2}  # every training task, twice
    assert not set(tasks) & held_out
    assert "60 demonstrations of 30 training tasks (seed 1)" in said
    for r in rows:
        messages = r["messages"]
        assert messages[0] == r["prompt"][0]  # the RL row's own prompt
        calls = [
            c["function"]["name"]
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
        ]
        assert calls and set(calls) <= {"bash", "editor"} and calls[-1] == "bash"  # the check runs last
        assert messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")  # then it stops
        assert {t["function"]["name"] for t in r["tools"]} == {"bash", "editor"}


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
def test_seeded(tmp_path, capsys):
    a, _ = generate(tmp_path / "a", capsys, "--seed", "3")
    b, _ = generate(tmp_path / "b", capsys, "--seed", "3")
    c, _ = generate(tmp_path / "c", capsys, "--seed", "4")
    order = [[r["extra_info"]["task"] for r in rows] for rows in (a, b, c)]
    assert order[0] == order[1] != order[2]


def test_search_flags_are_one_line(tmp_path, capsys):
    assert main(["data", "harbor_sft", "--out", str(tmp_path / "o"), "--topk", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["turnrl data: --topk: only for search_sft"]
    assert not (tmp_path / "o").exists()


def test_the_recipe_trains_on_them(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["data", "harbor_sft", "--out", "data/harbor_sft", "--n", "8"]) == 0
    code = main(["sft", "harbor_sft", "model.path=tiny-random", "trainer.total_training_steps=1"])
    out = capsys.readouterr().out
    assert code == 0 and "step 1:" in out
    run = next((tmp_path / "runs").iterdir())
    assert (run / "model" / "config.json").exists()
