"""Every benchmark answers `--help` with its usage, or, when it needs a package turnrl does not
depend on, with one line naming what to install: never a traceback (`shortcuts.py --help` once
tried to load a recipe named '--help').

The scripts run as `python benchmarks/x.py --help` would run them (their folder first on the path,
`__name__` "__main__", `sys.exit`'s message on stderr with status 1), all in one child interpreter,
so torch and transformers are imported once rather than once a script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).parents[2] / "benchmarks"
BENCHMARKS = sorted(p for p in BENCH_DIR.glob("[a-z]*.py"))

DRIVER = r"""
import contextlib, io, json, runpy, sys, traceback
sys.path.insert(0, sys.argv[1])
results = {}
for path in sys.argv[2:]:
    out, err, status = io.StringIO(), io.StringIO(), 0
    sys.argv = [path, "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
                status = 1
            else:
                status = e.code or 0
        except BaseException:
            traceback.print_exc()
            status = 1
    results[path] = [status, out.getvalue(), err.getvalue()]
sys.__stdout__.write(json.dumps(results))
"""


@pytest.fixture(scope="module")
def answers() -> dict[str, list]:
    """Each script's [exit status, stdout, stderr] for `--help`."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(BENCH_DIR), *map(str, BENCHMARKS)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_benchmarks_are_found():
    assert len(BENCHMARKS) >= 20 and any(p.name == "shortcuts.py" for p in BENCHMARKS)


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_help_is_usage_or_one_line(script: Path, answers: dict[str, list]):
    status, stdout, stderr = answers[str(script)]
    if status == 0:
        assert stdout.startswith(f"usage: {script.name}"), stdout[:200]
        return
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script.name}: needs ") and "pip install" in lines[0], (
        stderr[-500:]
    )
