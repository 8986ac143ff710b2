"""`benchmarks/gateway_load.py` end to end at its smallest: two process agents of one call each through
the gateway to tiny-random, every call timed and split into its phases (its `--help` is checked
with the other benchmarks', in test_bench_help.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gateway_load.py"


@pytest.mark.slow
def test_two_agents_of_one_call_are_timed(tmp_path):
    out = tmp_path / "load.json"
    args = ["--episodes", "2", "--calls", "1", "--concurrency", "2", "--client", "http", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [row] = json.loads(out.read_text())
    assert row["concurrency"] == 2 and row["calls"] == 2 and row["failed_episodes"] == 0
    assert row["refused_or_left"] == 0 and row["drifted_episodes"] == 0
    assert 0 < row["overhead_ms"]["median"] < row["total_ms_mean"]
    assert row["phase_ms_mean"]["engine"] > 0 and row["phase_ms_mean"]["plan"] > 0
    assert "gateway overhead per call" in done.stdout
