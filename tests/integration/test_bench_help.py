"""Every benchmark answers `--help` with its usage, or, when it needs a package turnrl does not
depend on, with one line naming what to install: never a traceback (`shortcuts.py --help` once
tried to load a recipe named '--help')."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted(p for p in (Path(__file__).parents[2] / "benchmarks").glob("[a-z]*.py"))


def test_the_benchmarks_are_found():
    assert len(BENCHMARKS) >= 20 and any(p.name == "shortcuts.py" for p in BENCHMARKS)


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_help_is_usage_or_one_line(script: Path):
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode == 0:
        assert done.stdout.startswith(f"usage: {script.name}"), done.stdout[:200]
        return
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script.name}: needs ") and "pip install" in lines[0], (
        done.stderr[-500:]
    )
