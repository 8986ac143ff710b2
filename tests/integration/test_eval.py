"""`turnrl eval` on a real tiny-random run: its greedy pass reproduces the run's validation exactly,
its files hold what docs/eval.md says, and bad input is one line."""

import json
import shutil
import uuid
from pathlib import Path

import pytest

from turnrl.cli import main
from turnrl.config import load_config
from turnrl.models.loader import cache_root
from turnrl.trainer.ppo import Trainer

# the share of non-space characters in the response, weighted by a per-prompt factor. The untrained
# tiny-random model answers every prompt greedily with newlines (score 0); two steps at a high learning
# rate make it answer with letters: the run's final validation differs from its first, so an eval that
# matches the final one must have loaded the trained weights
REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    letters = sum(not c.isspace() for c in solution_str) / max(len(solution_str), 1)\n"
    "    return letters * (int(ground_truth) % 4 + 1) / 4\n"
)
SOURCES = ("eval/a", "eval/b")


def write_rows(path: Path, count: int, sources: tuple[str, ...] = SOURCES) -> Path:
    rows = [
        {
            "data_source": sources[i % len(sources)],
            "prompt": [{"role": "user", "content": f"Say something about the number {i * 7 + 3}."}],
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "val", "index": i},
        }
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of 2 steps, validated and saved at every step and before training (9 prompts, two data sources)."""
    root = tmp_path_factory.mktemp("eval")
    (root / "reward.py").write_text(REWARD)
    run = root / f"run-{uuid.uuid4().hex[:8]}"  # names its export in the shared cache: removed below
    overrides = {
        "model.path": "tiny-random",
        "data.train_files": f"[{write_rows(root / 'train.jsonl', 8)}]",
        "data.val_files": f"[{write_rows(root / 'val.jsonl', 9)}]",
        "data.train_batch_size": 4,
        "data.val_batch_size": 4,  # 3 batches, the last one short: batching must match too
        "data.max_response_length": 8,
        "rollout.n": 4,
        "actor.ppo_mini_batch_size": 2,
        "actor.optim.lr": 5e-2,
        "trainer.total_training_steps": 2,
        "trainer.test_freq": 1,
        "trainer.save_freq": 1,
        "trainer.logger": "[jsonl]",
        "trainer.num_threads": 1,  # a tiny model gains nothing from threads; a busy machine loses 10x
        "trainer.default_local_dir": str(run),
        "reward.custom_function.path": str(root / "reward.py"),
    }
    Trainer(load_config(None, [f"{k}={v}" for k, v in overrides.items()])).fit()
    yield run
    for export in (cache_root() / "exports").glob(f"{run.name}-step_*"):
        shutil.rmtree(export, ignore_errors=True)


def val_rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "val/test_score/mean" in r]


def run_eval(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(120)
def test_greedy_equals_the_runs_validation(trained, tmp_path, capsys):
    out = tmp_path / "out"
    code, printed, err = run_eval(capsys, f"model.path={trained}", "eval.n=0", "--out", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    first, final = val_rows(trained)[0], val_rows(trained)[-1]
    assert final["step"] == 2
    assert 0 < final["val/test_score/mean"] != first["val/test_score/mean"]  # training moved the weights
    assert_same_as_validation(summary, final, trained / "val_samples" / "step_2.jsonl", out)
    # the run's own config was the base: its data, its reward, its latest checkpoint
    assert summary["run_config"] == str(trained / "config.yaml")
    assert summary["checkpoint"] == str(trained / "checkpoints" / "step_2")
    assert summary["config"]["reward"]["custom_function"]["path"].endswith("reward.py")
    assert "overall" in printed and "eval/a" in printed and printed.strip().endswith(f"eval directory: {out}")


@pytest.mark.timeout(120)
def test_a_checkpoint_equals_the_validation_of_its_step(trained, tmp_path, capsys):
    out = tmp_path / "out"
    step_1 = trained / "checkpoints" / "step_1"
    code, _, err = run_eval(capsys, f"model.path={step_1}", "eval.n=0", "--out", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    row = next(r for r in val_rows(trained) if r["step"] == 1)
    assert_same_as_validation(summary, row, trained / "val_samples" / "step_1.jsonl", out)
    assert summary["checkpoint"] == str(step_1) and summary["run_config"] == str(trained / "config.yaml")


def assert_same_as_validation(summary: dict, row: dict, val_samples: Path, out: Path) -> None:
    """Same weights, greedy, same prompts and batches: exactly equal, response for response."""
    metrics = summary["metrics"]
    assert set(metrics["per_data_source"]) == set(SOURCES)
    for source in SOURCES:
        assert metrics["per_data_source"][source]["greedy_score"] == row[f"val/test_score/{source}"]
    assert metrics["overall"]["greedy_score"] == row["val/test_score/mean"]
    theirs = [json.loads(line) for line in val_samples.open()]
    ours = [json.loads(line) for line in (out / "samples.jsonl").open()]
    assert [s["response"] for s in ours] == [s["response"] for s in theirs]
    assert [s["score"] for s in ours] == [s["score"] for s in theirs]


@pytest.mark.timeout(120)
def test_untrained_model_equals_validation_before_training(trained, tmp_path, capsys):
    """The run's config as a recipe with the start model: the step-0 validation row."""
    out = tmp_path / "out"
    args = [str(trained / "config.yaml"), "model.path=tiny-random", "eval.n=0", "--out", str(out)]
    code, _, err = run_eval(capsys, *args)
    assert code == 0, err
    first = val_rows(trained)[0]
    assert first["step"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert_same_as_validation(summary, first, trained / "val_samples" / "step_0.jsonl", out)
    assert summary["checkpoint"] is None and summary["run_config"] is None


@pytest.mark.timeout(120)
def test_summary_and_samples_hold_the_documented_fields(trained, tmp_path, capsys):
    out = tmp_path / "out"
    args = [f"model.path={trained}", "eval.n=4", "eval.max_prompts=5", "eval.success_threshold=0.5"]
    code, _, err = run_eval(capsys, *args, "--out", str(out))
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["samples.jsonl", "summary.json"]  # no temp files left
    summary = json.loads((out / "summary.json").read_text())
    for key in ("model", "checkpoint", "run_config", "files", "success_threshold", "passes", "counts"):
        assert key in summary, key
    for key in ("metrics", "diagnostics", "wall_time_s", "finished_at", "config"):
        assert key in summary, key
    assert summary["counts"] == {
        "prompts": 5,
        "prompts_per_data_source": {"eval/a": 3, "eval/b": 2},
        "responses": {"greedy": 5, "sampled": 20},
    }
    assert summary["passes"]["sampled"]["ks"] == [1, 2, 4]
    assert summary["passes"]["greedy"]["temperature"] == 0.0
    # the engine's work per pass: 5 prompts prefilled once, 4 samples each decoded
    greedy, sampled = summary["passes"]["greedy"]["engine"], summary["passes"]["sampled"]["engine"]
    assert greedy["engine/prefill_new_tokens"] > 0 and greedy["engine/decode_steps"] > 0
    assert sampled["engine/decode_rows"] > greedy["engine/decode_rows"]
    assert (
        0 < greedy["engine/prefill_s"] + greedy["engine/decode_s"] <= summary["passes"]["greedy"]["seconds"]
    )
    overall = summary["metrics"]["overall"]
    assert list(overall) == ["prompts", "greedy_score", "mean@4", "pass@1", "pass@2", "pass@4"]
    assert overall["pass@1"] <= overall["pass@2"] <= overall["pass@4"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").open()]
    assert len(rows) == 5 + 20
    fields = {"pass", "prompt_index", "sample", "data_source", "index", "prompt", "response", "score"}
    assert all(fields <= set(r) for r in rows)
    sampled = [r for r in rows if r["pass"] == "sampled"]
    assert [(r["prompt_index"], r["sample"]) for r in sampled] == [(p, s) for p in range(5) for s in range(4)]
    # the summary's numbers are the samples' numbers
    by_prompt = [[r["score"] for r in sampled if r["prompt_index"] == p] for p in range(5)]
    assert overall["mean@4"] == pytest.approx(sum(map(sum, by_prompt)) / 20)
    solved = sum(any(s >= 0.5 for s in g) for g in by_prompt)
    assert overall["pass@4"] == pytest.approx(solved / 5)


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("turnrl eval:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.timeout(120)
def test_bad_input_is_one_line(trained, tmp_path, capsys):
    out = tmp_path / "out"
    run = f"model.path={trained}"
    line = one_line(*run_eval(capsys, run, f"eval.files=[{tmp_path}/nope.jsonl]", "--out", str(out))[::2])
    assert "nope.jsonl" in line and "not found" in line and "eval.files" in line
    (tmp_path / "empty.jsonl").write_text("")
    line = one_line(*run_eval(capsys, run, f"eval.files=[{tmp_path}/empty.jsonl]", "--out", str(out))[::2])
    assert "empty.jsonl" in line and "no rows" in line
    assert not out.exists()  # nothing was written for a failed evaluation

    out.mkdir()
    (out / "summary.json").write_text("{}")
    line = one_line(*run_eval(capsys, run, "--out", str(out))[::2])
    assert str(out) in line and "not empty" in line

    bare = tmp_path / "bare-run"  # a run that never saved a checkpoint
    (bare / "checkpoints").mkdir(parents=True)
    shutil.copy(trained / "config.yaml", bare / "config.yaml")
    line = one_line(*run_eval(capsys, f"model.path={bare}", "--out", str(tmp_path / "o2"))[::2])
    assert str(bare) in line and "no usable checkpoint" in line

    line = one_line(
        *run_eval(capsys, run, "eval.n=0", "eval.greedy=false", "--out", str(tmp_path / "o3"))[::2]
    )
    assert "nothing to evaluate" in line


@pytest.mark.timeout(180)
def test_with_the_bfloat16_defaults_greedy_still_equals_the_runs_validation(tmp_path, capsys, monkeypatch):
    """Where `auto` means bfloat16 (forced here on any CPU), the run validates from its bfloat16
    sampling copy; the eval of its checkpoint must sample from the same copy, not the float32 policy."""
    monkeypatch.delenv("TURNRL_EXACT", raising=False)
    monkeypatch.setattr("turnrl.models.precision.bf16_supported", lambda device: True)
    (tmp_path / "reward.py").write_text(REWARD)
    run = tmp_path / f"run-{uuid.uuid4().hex[:8]}"
    overrides = {
        "model.path": "tiny-random",
        "data.train_files": f"[{write_rows(tmp_path / 'train.jsonl', 4)}]",
        "data.val_files": f"[{write_rows(tmp_path / 'val.jsonl', 9)}]",
        "data.train_batch_size": 4,
        "data.val_batch_size": 4,
        "data.max_response_length": 8,
        "rollout.n": 2,
        "actor.ppo_mini_batch_size": 4,
        "actor.optim.lr": 5e-2,
        "trainer.total_training_steps": 1,
        "trainer.test_freq": 1,
        "trainer.save_freq": 1,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.num_threads": 1,
        "trainer.default_local_dir": str(run),
        "reward.custom_function.path": str(tmp_path / "reward.py"),
    }
    trainer = Trainer(load_config(None, [f"{k}={v}" for k, v in overrides.items()]))
    assert trainer.cfg.rollout.dtype in ("", "bfloat16")
    trainer.fit()
    try:
        out = tmp_path / "out"
        code, _, err = run_eval(capsys, f"model.path={run}", "eval.n=0", "--out", str(out))
        assert code == 0, err
        summary = json.loads((out / "summary.json").read_text())
        assert summary["config"]["rollout"]["dtype"] == "bfloat16"  # the copy, as in training
        assert_same_as_validation(summary, val_rows(run)[-1], run / "val_samples" / "step_1.jsonl", out)
    finally:
        for export in (cache_root() / "exports").glob(f"{run.name}-step_*"):
            shutil.rmtree(export, ignore_errors=True)


@pytest.mark.timeout(120)
def test_packed_weights_evaluate_the_same_prompts(trained, tmp_path, capsys):
    # eval.pack_weights: the frozen model's linear layers from oneDNN-packed weights (rounding apart
    # from the BLAS, so the responses are not compared bit for bit), every prompt answered and scored
    out = tmp_path / "packed"
    code, _, err = run_eval(
        capsys, f"model.path={trained}", "eval.n=0", "eval.pack_weights=true", "--out", str(out)
    )
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["eval"]["pack_weights"] is True
    assert summary["counts"]["responses"]["greedy"] == 9
    assert summary["passes"]["greedy"]["engine"]["engine/decode_steps"] > 0
