"""Bad input stops `turnrl train` at start-up with one line naming the culprit; nothing is written.

The cases run in-process through `turnrl.cli.main` (tests/support/cli.py); the first test runs the
installed `turnrl` console script for real, so the entry point, the exit code a shell sees and the
absence of a traceback are checked on the real process too."""

import json
import subprocess
from pathlib import Path

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


# Numbers out of range and output paths the OS refuses, on the real console script: each is one line
# on stderr naming the key or flag, exit code 2, no traceback, nothing written. `model.path` names no
# model: the line is about the number or the path, so it was found before any model was looked at.
NO_MODEL = "model.path=/no/such/model"
REAL_PROCESS_CASES = {
    "steps below 0": (
        ["train", "trainer.total_training_steps=-1", NO_MODEL],
        "turnrl train: 'trainer.total_training_steps' must be >= 0 (0 = run trainer.total_epochs), got -1",
    ),
    "negative learning rate": (
        ["train", "actor.optim.lr=-1e-5", NO_MODEL],
        "turnrl train: 'actor.optim.lr' must be > 0, got -1e-05",
    ),
    "NaN learning rate": (
        ["train", "actor.optim.lr=nan", NO_MODEL],
        "turnrl train: 'actor.optim.lr' must be finite and > 0, got nan",
    ),
    "no samples per prompt": (
        ["train", "rollout.n=0", NO_MODEL],
        "turnrl train: 'rollout.n' must be in [1, 65536] (a group's size; more is a typo), got 0",
    ),
    "sft steps below 0": (
        ["sft", "trainer.total_training_steps=-1", NO_MODEL],
        "turnrl sft: 'trainer.total_training_steps' must be >= 0 (0 = run trainer.total_epochs), got -1",
    ),
    "run directory in /proc": (
        ["train", "trainer.default_local_dir=/proc/x/run", NO_MODEL],
        "turnrl train: run directory (trainer.default_local_dir) /proc/x/run: cannot create /proc/x "
        "(No such file or directory)",
    ),
    "eval --out in /proc": (
        ["eval", NO_MODEL, "--out", "/proc/x"],
        "turnrl eval: --out /proc/x: cannot create (No such file or directory)",
    ),
    "data --out in /proc": (
        ["data", "task", "addition", "--out", "/proc/x"],
        "turnrl data: --out /proc/x: cannot create (No such file or directory)",
    ),
    "data --out under a file": (
        ["data", "task", "addition", "--out", "notes/addition"],
        "turnrl data: --out notes/addition: notes is a file, not a directory",
    ),
    # a name over 255 bytes: every file-system call on it raised ENAMETOOLONG, a traceback
    "eval model.path with a 300-byte name": (
        ["eval", "model.path=" + "a" * 300],
        "turnrl eval: 'model.path': a name in the path is 300 bytes long, more than a file system allows "
        "(255): '" + "a" * 40 + "...'",
    ),
    "train model.path with a 300-byte name": (
        ["train", "model.path=/tmp/" + "a" * 300],
        "turnrl train: 'model.path': a name in the path is 300 bytes long, more than a file system allows "
        "(255): '" + "a" * 40 + "...'",
    ),
    "export --out in /proc": (
        ["export", "no_run", "--out", "/proc/x"],
        "turnrl export: --out /proc/x: cannot create (No such file or directory)",
    ),
}


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("case", list(REAL_PROCESS_CASES))
def test_bad_numbers_and_output_paths_are_one_line(tmp_path, case):
    argv, line = REAL_PROCESS_CASES[case]
    (tmp_path / "notes").write_text("a file where a directory should be\n")
    proc = subprocess.run(
        [console_script(), *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [line]), proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes"]  # nothing written
