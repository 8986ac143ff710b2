"""What the benchmarks that chain real CLI stages share: run `turnrl ARGS` in a child process with its
output in a log, and plot a run. (`benchmarks/` is a folder of scripts; `python benchmarks/x.py` puts
this folder first on the path, so `from _cli import cli` finds this module.)"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def cli(args: list[str], log: Path) -> float:
    """Run `turnrl ARGS` (this interpreter's turnrl); its output goes to `log`. Returns wall seconds;
    a failed stage ends the benchmark with the command and the last 30 lines of its log."""
    cmd = [sys.executable, "-m", "turnrl.cli", *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write(shlex.join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "TQDM_DISABLE": "1"}
        )
    wall = time.perf_counter() - start
    if done.returncode:
        tail = log.read_text().splitlines()[-30:]
        sys.exit(f"failed ({done.returncode}): {shlex.join(cmd)}\n" + "\n".join(tail))
    return wall


def report(run_dir: Path) -> str:
    """`turnrl report RUN_DIR`: its plots and page; returns the page's path."""
    cli(["report", str(run_dir)], run_dir.with_name(run_dir.name + "_report.log"))
    return str(run_dir / "report" / "report.html")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSONL file's rows (metrics.jsonl, samples.jsonl, val_samples/step_N.jsonl)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


TINY_RUN = [
    "model.path=tiny-random",
    "data.train_batch_size=2",
    "rollout.n=2",
    "actor.ppo_mini_batch_size=2",
    "data.max_response_length=8",
    "data.val_batch_size=40",
]
"""A smoke run's `turnrl train` overrides: tiny-random, small batches, a few validation prompts."""
