"""The search agent's cold start as shipped recipes: `turnrl sft search_sft`, then `turnrl train
search_agent_rl`. They carry the settings of the README's "SFT then RL from these cold starts", SFT
recipes stay apart from train recipes, and benchmarks/cold_start.py runs the same recipes."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.support.cli import one_line_error
from turnrl.config import load_config, to_yaml
from turnrl.config.loader import builtin_recipes, builtin_sft_recipes
from turnrl.config.supervised_schema import SFTConfig
from turnrl.supervised.checks import check_sft

ROOT = Path(__file__).resolve().parents[2]
TABLE_RL = [  # what cold_start.py passed on top of `search_agent` for the table, seeds 1-3
    "data.max_response_length=512", "data.val_batch_size=128", "rollout.generation_batch_size=128",
    "rollout.multi_turn.max_turns=3", "rollout.multi_turn.search.topk=3", "data.train_batch_size=6",
    "rollout.n=4", "actor.ppo_mini_batch_size=3", "actor.optim.lr=1e-05", "actor.optim.lr_warmup_steps=0",
    "actor.use_kl_loss=false", "trainer.total_training_steps=8", "trainer.val_before_train=false",
    "trainer.test_freq=0", "trainer.save_freq=0", "data.task_args.train=val_two_hop_mix",
    "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=2",
    "actor.ppo_micro_batch_size=4", "trainer.experiment_name=search-agent-rl",
]  # fmt: skip
TABLE_SFT = [  # and on top of `turnrl sft`'s defaults
    "model.path=smollm2-135m-instruct", "data.train_files=[data/search_sft/train.jsonl]",
    "data.max_obs_length=500", "trainer.total_epochs=1", "trainer.train_batch_size=8",
    "trainer.micro_batch_size=4", "optim.lr=0.0001", "trainer.experiment_name=search-sft",
]  # fmt: skip


def sft_config(recipe: str | None, overrides: list[str] | None = None) -> SFTConfig:
    return load_config(recipe, overrides, schema=SFTConfig, check=check_sft, command="sft")


def test_the_recipes_load_pass_the_checks_and_hold_the_tables_settings():
    rl = load_config("search_agent_rl")  # check_config runs
    assert to_yaml(rl) == to_yaml(load_config("search_agent", TABLE_RL))
    sft = sft_config("search_sft")  # check_sft runs
    assert to_yaml(sft) == to_yaml(sft_config(None, TABLE_SFT))
    # SFT cuts passages where RL will, and RL validates greedy on the task's held-out world
    assert sft.data.max_obs_length == rl.rollout.multi_turn.max_obs_length
    assert rl.rollout.val_temperature == 0 and rl.data.val_files == [] and rl.data.task == "search"


def test_sft_recipes_are_apart_from_train_recipes(cli):
    assert "search_sft" in builtin_sft_recipes() and "search_agent_rl" not in builtin_sft_recipes()
    assert "search_sft" not in builtin_recipes() and "search_agent_rl" in builtin_recipes()
    assert (ROOT / "examples" / "sft" / "search_sft.yaml").is_file()  # examples/ is the package's folder
    listed = cli("sft", "--list-recipes")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(builtin_sft_recipes())
    assert "search_sft           Search-agent cold start, supervised half" in listed.stdout
    trains = cli("train", "--list-recipes").stdout
    assert "search_agent_rl" in trains and "search_sft" not in trains


def test_turnrl_sft_resolves_a_built_in_name(cli):
    shown = cli("sft", "search_sft", "trainer.seed=2", "--show-config")
    assert shown.returncode == 0, shown.stderr
    assert "- data/search_sft/train.jsonl" in shown.stdout and "lr: 0.0001" in shown.stdout
    assert "seed: 2" in shown.stdout


@pytest.mark.parametrize(
    ("command", "name", "words"),
    [
        (
            "sft",
            "grpo",
            "'grpo' is a `turnrl train` recipe, not a `turnrl sft` one; built-in: harbor_sft, search_sft",
        ),
        ("sft", "search_stf", "did you mean 'search_sft'? built-in: harbor_sft, search_sft"),
        ("train", "search_sft", "'search_sft' is a `turnrl sft` recipe, not a `turnrl train` one"),
        ("train", "no_such_recipe", "built-in: calculator_agent, code_agent, grpo"),
        ("rm", "search_sft", "not a `turnrl rm` one; built-in: none"),
    ],
)
def test_an_unknown_recipe_name_is_one_line_with_the_valid_ones(cli, command, name, words):
    assert words in one_line_error(cli(command, name), command)


def cold_start(monkeypatch):
    """benchmarks/cold_start.py as a module (it imports its neighbour `_cli` as the script does)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    for name in ("cold_start", "_cli"):
        sys.modules.pop(name, None)
    return importlib.import_module("cold_start")


def keys(command: list[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in command if "=" in arg]


PLUMBING = ["trainer.seed", "trainer.num_threads", "trainer.logger", "trainer.default_local_dir"]


def test_cold_start_runs_the_recipes_with_its_flags_as_overrides(monkeypatch, tmp_path):
    bench = cold_start(monkeypatch)
    a = bench.settings([])
    rl = bench.rl_command(a, "runs/sft", tmp_path / "rl", tmp_path / "val.jsonl", 2)
    sft = bench.sft_command(a, tmp_path / "train.jsonl", tmp_path / "sft", 2)
    evaluation = bench.eval_command(a, "runs/sft", tmp_path / "eval", tmp_path / "val.jsonl", 2)
    assert rl[:2] == ["train", "search_agent_rl"] and evaluation[:2] == ["eval", "search_agent_rl"]
    assert sft[:2] == ["sft", "search_sft"]
    # its defaults are the recipes': nothing of the method is set on the command line
    assert keys(rl) == ["model.path", "data.val_files", *PLUMBING]
    assert keys(sft) == ["data.train_files", *PLUMBING]
    assert keys(evaluation) == ["model.path", "data.val_files", *PLUMBING[:2], "eval.n"]
    assert (a.steps, a.batch, a.n, a.rl_lr, a.sft_lr, a.demos) == (8, 6, 4, 1e-5, 1e-4, 192)

    lever = bench.settings(["--steps", "3", "--sft-lr", "2e-4", "--rl-set", "algorithm.adv_estimator=gigpo"])
    rl = bench.rl_command(lever, "runs/sft", tmp_path / "rl", tmp_path / "val.jsonl", 2)
    assert "trainer.total_training_steps=3" in rl and rl[-1] == "algorithm.adv_estimator=gigpo"
    assert "optim.lr=0.0002" in bench.sft_command(lever, tmp_path / "t.jsonl", tmp_path / "sft", 2)
