"""benchmarks/harbor_agent.py end to end on tiny-random (`--tiny`: two held-out tasks, one seed, one
RL step): every stage runs as the real CLI, the table holds each condition with its paired intervals,
and `--resume` reuses every finished stage instead of running it again."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "harbor_agent.py"


def run(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    cmd = [sys.executable, str(SCRIPT), "--model", "tiny-random", "--tiny", "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.slow  # about 2 minutes on 2 cores: an evaluation, SFT and an RL step of the coding agent
@pytest.mark.timeout(1200)
def test_every_condition_is_measured_and_resumed(tmp_path):
    out = tmp_path / "harbor"
    first = run(out)
    assert first.returncode == 0, first.stderr[-2000:]
    result = json.loads((out / "harbor_agent.json").read_text())
    assert set(result["results"]) == {
        "empty attempt", "the nearest training task's oracle", "untrained", "SFT", "SFT + RL",
    }  # fmt: skip
    for name in ("SFT - untrained", "SFT + RL - SFT"):
        pooled = result["gains"][name]["all"]["pooled"]
        assert (pooled["questions"], pooled["seeds"]) == (2, 1)
        assert pooled["low"] <= pooled["diff"] <= pooled["high"]
    assert (out / "sft_rl_s1" / "val_samples").is_dir()
    again = run(out, "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    reused = [line for line in again.stdout.splitlines() if ": reused (" in line]
    assert len(reused) == 5  # the untrained and SFT evaluations, the demonstrations, SFT and RL
    assert run(out).returncode != 0  # a non-empty --out without --resume is refused
