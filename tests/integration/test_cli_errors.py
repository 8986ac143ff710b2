"""Bad input stops `turnrl train` at start-up with one line naming the culprit; nothing is written."""

import json
import subprocess
import sys

import pytest


def run_train(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "turnrl.cli", "train", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("turnrl train:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_unknown_key(tmp_path):
    line = one_line_error(
        run_train("actor.learning_rate=1e-5", f"trainer.default_local_dir={tmp_path / 'run'}")
    )
    assert "actor.learning_rate" in line and "did you mean" in line
    assert not (tmp_path / "run").exists()


def test_batch_size_not_divisible(tmp_path):
    line = one_line_error(run_train("data.train_batch_size=6", "actor.ppo_mini_batch_size=4"))
    assert "train_batch_size" in line and "ppo_mini_batch_size" in line


@pytest.mark.timeout(200)
def test_missing_model_path_writes_nothing(tmp_path):
    run = tmp_path / "run"
    line = one_line_error(run_train("model.path=/no/such/model", f"trainer.default_local_dir={run}"))
    assert "/no/such/model" in line and "does not exist" in line
    assert not run.exists()


@pytest.mark.timeout(200)
def test_missing_and_malformed_data_files(tmp_path):
    run = tmp_path / "run"
    line = one_line_error(
        run_train(
            "model.path=tiny-random",
            f"data.train_files=[{tmp_path}/nope.jsonl]",
            f"data.val_files=[{tmp_path}/nope.jsonl]",
            f"trainer.default_local_dir={run}",
        )
    )
    assert "nope.jsonl" in line and "not found" in line
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"data_source": "turnrl/addition", "prompt": [{"role": "user", "content": "1+1"}]}) + "\n"
    )
    line = one_line_error(
        run_train(
            "model.path=tiny-random",
            f"data.train_files=[{bad}]",
            f"data.val_files=[{bad}]",
            f"trainer.default_local_dir={run}",
        )
    )
    assert "bad.jsonl row 0" in line and "ground_truth" in line
    assert not run.exists()
