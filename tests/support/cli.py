"""Running `turnrl` commands in-process, through `turnrl.cli.main` as the console script does.

A `turnrl train` subprocess pays for importing torch and transformers again (seconds on a small
machine); error tests call `main` instead and read what it wrote to stderr. `main` returns the exit
code the console script exits with (`sys.exit(main())`), and the commands print their one-line
errors themselves, so the assertions are the ones a subprocess test would make. One subprocess
smoke test (tests/integration/test_cli_errors.py) keeps the real console script covered.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from turnrl.cli import main


@dataclass
class Result:
    """What a command left: its exit code and its stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


@contextmanager
def process_state() -> Iterator[None]:
    """Put back the process-wide settings a run changes (torch threads, deterministic kernels), so
    a command run in-process leaves the tests after it as it found them."""
    import torch

    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def run_cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *argv: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    """`turnrl *argv` in this process, in `cwd`, with `env` added to the environment (child
    processes the command starts, such as the reward child, see both)."""
    capsys.readouterr()  # drop what the test printed before
    with monkeypatch.context() as patch, process_state():
        if cwd is not None:
            patch.chdir(cwd)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        code = main(list(argv))
    out = capsys.readouterr()
    return Result(code, out.out, out.err)


def one_line_error(result: Result | subprocess.CompletedProcess[str], command: str = "train") -> str:
    """The single `turnrl COMMAND: ...` line of a run that stopped on bad input (exit code 2)."""
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(f"turnrl {command}:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def console_script() -> str:
    """The installed `turnrl` executable next to this interpreter."""
    path = Path(sys.executable).parent / "turnrl"
    assert path.exists(), f"{path}: install the package (pip install -e .)"
    return os.fspath(path)
