"""Bad input stops `turnrl train` at start-up with one line naming the culprit; nothing is written.

The cases run in-process through `turnrl.cli.main` (tests/support/cli.py); the first test runs the
installed `turnrl` console script for real, so the entry point, the exit code a shell sees and the
absence of a traceback are checked on the real process too."""

import json
import subprocess

import pytest

from tests.support.cli import console_script, one_line_error


def test_the_console_script_exits_2_with_one_line(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(
        [console_script(), "train", "actor.learning_rate=1e-5", f"trainer.default_local_dir={run}"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "turnrl train: unknown config key 'actor.learning_rate' in override 'actor.learning_rate=1e-5'; "
        "did you mean 'actor.optim.lr'?"
    ]
    assert proc.stdout == ""
    assert not run.exists()


def test_unknown_key(tmp_path, cli):
    line = one_line_error(
        cli("train", "actor.learning_rate=1e-5", f"trainer.default_local_dir={tmp_path / 'run'}")
    )
    assert "actor.learning_rate" in line and "did you mean" in line
    assert not (tmp_path / "run").exists()


def test_batch_size_not_divisible(cli):
    line = one_line_error(cli("train", "data.train_batch_size=6", "actor.ppo_mini_batch_size=4"))
    assert "train_batch_size" in line and "ppo_mini_batch_size" in line


@pytest.mark.timeout(200)
def test_missing_model_path_writes_nothing(tmp_path, cli):
    run = tmp_path / "run"
    line = one_line_error(cli("train", "model.path=/no/such/model", f"trainer.default_local_dir={run}"))
    assert "/no/such/model" in line and "does not exist" in line
    assert not run.exists()


@pytest.mark.timeout(200)
def test_missing_and_malformed_data_files(tmp_path, cli):
    run = tmp_path / "run"
    line = one_line_error(
        cli(
            "train",
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
        cli(
            "train",
            "model.path=tiny-random",
            f"data.train_files=[{bad}]",
            f"data.val_files=[{bad}]",
            f"trainer.default_local_dir={run}",
        )
    )
    assert "bad.jsonl row 0" in line and "ground_truth" in line
    assert not run.exists()
