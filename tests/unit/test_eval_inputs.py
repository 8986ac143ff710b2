"""`turnrl eval`'s inputs, checked before any model loads: the eval section, the output directory,
which config a run directory brings."""

from pathlib import Path

import pytest

from turnrl.config import ConfigError, load_config, to_yaml
from turnrl.evaluate.inputs import (
    EvalError,
    check_eval,
    check_out_dir,
    default_out_dir,
    eval_config,
    train_run_of,
)
from turnrl.trainer import checkpoint


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["eval.greedy=false", "eval.n=0"], "nothing to evaluate"),
        (["eval.n=-1"], "eval.n"),
        (["eval.max_prompts=-3"], "eval.max_prompts"),
        (["eval.temperature=0"], "eval.temperature"),
        (["eval.top_p=0"], "eval.top_p"),
    ],
)
def test_bad_eval_section_is_one_line(overrides, words):
    with pytest.raises(ConfigError, match=words):
        check_eval(load_config(None, overrides))


def test_greedy_only_needs_no_temperature():
    check_eval(load_config(None, ["eval.n=0", "eval.temperature=0"]))


def test_out_dir_must_be_new_or_empty(tmp_path):
    assert check_out_dir(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    check_out_dir(tmp_path / "empty")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(EvalError, match="not empty"):
        check_out_dir(tmp_path / "full")
    with pytest.raises(EvalError, match="is a file"):
        check_out_dir(tmp_path / "full" / "x")


def fake_run(root: Path, **overrides: str) -> Path:
    """A run directory as `turnrl train` lays it out, minus the weights."""
    cfg = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    (root / "checkpoints").mkdir(parents=True)
    (root / "config.yaml").write_text(to_yaml(cfg))
    return root


def test_a_run_directory_brings_its_own_config(tmp_path):
    run = fake_run(tmp_path / "run", **{"data.max_response_length": "77", "rollout.n": "3"})
    assert train_run_of(run) == run
    # a run without a checkpoint cannot be evaluated: said before anything loads
    with pytest.raises(EvalError, match="no usable checkpoint"):
        eval_config(None, [f"model.path={run}"])
    step = run / "checkpoints" / "step_5"
    (step / "actor").mkdir(parents=True)
    (step / "trainer_state.json").write_text('{"global_step": 5}')
    checkpoint.write_manifest(step)
    assert train_run_of(step) == run  # a checkpoint belongs to its run
    # the run's config, then the overrides
    cfg, found = eval_config(None, [f"model.path={run}", "data.max_response_length=5"])
    assert found == run and cfg.rollout.n == 3 and cfg.data.max_response_length == 5
    assert cfg.model.path == str(run)
    # a recipe given: the recipe, not the run's config
    cfg, found = eval_config("grpo", [f"model.path={run}"])
    assert found is None and cfg.rollout.n != 3


def test_sft_outputs_and_plain_directories_are_not_training_runs(tmp_path):
    sft = tmp_path / "sft"
    (sft / "model").mkdir(parents=True)
    (sft / "model" / "config.json").write_text("{}")
    (sft / "config.yaml").write_text("model: {path: tiny-random}\n")
    assert train_run_of(sft) is None
    assert train_run_of(tmp_path / "nowhere") is None
    cfg, run = eval_config(None, ["model.path=tiny-random", "eval.n=2"])
    assert run is None and cfg.eval.n == 2


def test_default_out_dir_names_the_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["model.path=Qwen/Qwen2.5-0.5B-Instruct"])
    out = default_out_dir(cfg, None)
    assert out.parent == Path("evals") and out.name.startswith("Qwen2.5-0.5B-Instruct-")
    out.mkdir(parents=True)
    assert default_out_dir(cfg, None) != out  # two evaluations in one second get two directories
    run = fake_run(tmp_path / "myrun")
    cfg = load_config(None, [f"model.path={run / 'checkpoints' / 'step_3'}"])
    assert default_out_dir(cfg, run).name.startswith("myrun-step_3-")
