"""The commands in the header of the search agent's cold-start recipes run as written, end to end on
tiny-random (few demonstrations, one RL step), and benchmarks/cold_start.py's demonstrations are
theirs."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from turnrl.config.loader import builtin_recipes, builtin_sft_recipes

ROOT = Path(__file__).resolve().parents[2]
RUN_DIR = "<the SFT run directory>"
TINY_SFT = ["model.path=tiny-random", "trainer.num_threads=1"]
TINY_RL = [
    "trainer.total_training_steps=1", "data.train_batch_size=2", "rollout.n=2",
    "actor.ppo_mini_batch_size=1", "data.max_response_length=32", "rollout.multi_turn.max_turns=1",
    "trainer.num_threads=1",
]  # fmt: skip


def header_commands(recipe: Path) -> list[list[str]]:
    """The `turnrl ...` lines of a recipe's header comment, without `turnrl` and their own comments."""
    lines = [line.lstrip("# ") for line in recipe.read_text().splitlines() if line.startswith("#   turnrl ")]
    # the placeholder is one word to the reader: keep it one argument
    return [shlex.split(line.replace(RUN_DIR, shlex.quote(RUN_DIR)), comments=True)[1:] for line in lines]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_header_commands_run_and_write_what_each_stage_promises(cli, tmp_path):
    commands = header_commands(builtin_sft_recipes()["search_sft"])
    assert commands == header_commands(builtin_recipes()["search_agent_rl"])  # one recipe page, two files
    data, sft, train = commands
    assert data[:2] == ["data", "search_sft"] and sft[:2] == ["sft", "search_sft"]
    assert train[:2] == ["train", "search_agent_rl"] and f"model.path={RUN_DIR}" in train

    done = cli(*data, "--n", "8", cwd=tmp_path)  # the last --n wins: 8 demonstrations
    assert done.returncode == 0, done.stderr
    demos = (tmp_path / "data" / "search_sft" / "train.jsonl").read_text().splitlines()
    assert len(demos) == 8 and all("episode" in json.loads(row) for row in demos)

    done = cli(*sft, *TINY_SFT, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sft_run = Path(re.search(r"^run directory: (.+)$", done.stdout, re.M).group(1))
    assert f"model: {sft_run / 'model'}" in done.stdout
    sft_run = sft_run if sft_run.is_absolute() else tmp_path / sft_run
    assert (sft_run / "model" / "config.json").is_file() and (sft_run / "metrics.jsonl").is_file()
    sft_config = yaml.safe_load((sft_run / "config.yaml").read_text())
    assert sft_config["optim"]["lr"] == 1e-4 and sft_config["trainer"]["seed"] == 1

    train = [f"model.path={sft_run}" if arg == f"model.path={RUN_DIR}" else arg for arg in train]
    done = cli(*train, *TINY_RL, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rl_run = Path(re.search(r"^run directory: (.+)$", done.stdout, re.M).group(1))
    rl_run = rl_run if rl_run.is_absolute() else tmp_path / rl_run
    assert (rl_run / "checkpoints" / "step_1").is_dir()
    assert (rl_run / "val_samples" / "step_1.jsonl").is_file()
    metrics = [json.loads(line) for line in (rl_run / "metrics.jsonl").read_text().splitlines()]
    assert any("val/test_score/mean" in row for row in metrics)  # validated after the last step
    cfg = yaml.safe_load((rl_run / "config.yaml").read_text())
    assert cfg["model"]["path"] == str(sft_run) and cfg["trainer"]["seed"] == 1
    assert cfg["data"]["task_args"] == {"train": "val_two_hop_mix"}
    dynamic, actor = cfg["algorithm"]["filter_groups"], cfg["actor"]
    assert (dynamic["enable"], dynamic["max_num_gen_batches"]) == (True, 2)
    assert (actor["optim"]["lr"], actor["ppo_micro_batch_size"], actor["use_kl_loss"]) == (1e-5, 4, False)
    assert cfg["rollout"]["multi_turn"]["search"]["topk"] == 3 and cfg["rollout"]["val_temperature"] == 0


def test_the_benchmarks_demonstrations_are_the_header_commands(cli, tmp_path, monkeypatch):
    """`cold_start.py`'s `turnrl data search_sft`, with its defaults, writes the same 192
    demonstrations as the recipes' header command for the same seed."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    for name in ("cold_start", "_cli"):
        sys.modules.pop(name, None)
    bench = importlib.import_module("cold_start")
    data, _, _ = header_commands(builtin_sft_recipes()["search_sft"])
    seed = int(data[data.index("--seed") + 1])
    done = cli(*bench.demos_command(bench.settings([]), tmp_path / "bench", seed), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert cli(*data, cwd=tmp_path).returncode == 0
    written = (tmp_path / "data" / "search_sft" / "train.jsonl").read_text()
    assert len(written.splitlines()) == 192 and written == (tmp_path / "bench" / "train.jsonl").read_text()
