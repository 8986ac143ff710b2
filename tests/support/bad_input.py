"""Inputs for the bad-input tests of `turnrl train` (docs/errors.md): good rows of the addition
task, the smallest run that trains, and the run itself in-process or as a process."""

import json
import subprocess
import sys
from pathlib import Path

from turnrl.tasks.addition import make_row

# the smallest run that trains: 2 prompts x 2 samples of 8 tokens
TINY_RUN = (
    "data.train_batch_size=2",
    "actor.ppo_mini_batch_size=2",
    "rollout.n=2",
    "data.max_response_length=8",
    "trainer.total_training_steps=1",
    "trainer.val_before_train=false",
    "trainer.test_freq=0",
)


def train_process(cwd: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """`turnrl train ...` as a subprocess in `cwd`, for a run that needs limits of its own."""
    return subprocess.run(
        [sys.executable, "-m", "turnrl.cli", "train", *args],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=cwd,
        **kwargs,
    )


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path.name


def good_rows(n: int) -> list[dict]:
    return [make_row(i % 10, (3 * i) % 10, "train", i) for i in range(n)]


def data_args(train: str, val: str = "val.jsonl") -> list[str]:
    return ["model.path=tiny-random", f"data.train_files=[{train}]", f"data.val_files=[{val}]"]


def make_work(tmp_path: Path) -> Path:
    """A working directory with good training and validation files (run there: short names)."""
    write_jsonl(tmp_path / "val.jsonl", good_rows(2))
    write_jsonl(tmp_path / "good.jsonl", good_rows(8))
    return tmp_path


def in_process_train(cli):
    """`train(cwd, *args, env=...)`: `turnrl train *args` in `cwd`, in-process (`cli` fixture)."""

    def run(cwd: Path, *args: str, env: dict[str, str] | None = None):
        return cli("train", *args, cwd=cwd, env=env)

    return run
