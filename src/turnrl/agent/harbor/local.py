"""A task run in a plain temporary folder, without the sandbox: for tasks whose scripts are trusted
(the built-in ones), to check that the reference solution scores 1 and an untouched workspace 0,
and to record what the check command prints for a demonstration.

The scripts find their folders through the environment: `TURNRL_WORKSPACE` (the workspace, /app in
a sandbox) and `TURNRL_VERIFIER_DIR` (where the reward is written, /logs/verifier in a sandbox);
test.sh finds its own files beside itself. Everything runs on this machine, unconfined: never run
a task from an untrusted source this way.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from turnrl.agent.harbor.reward import Verdict, VerifierOutput, reward_of
from turnrl.agent.harbor.spec import TESTS, WORKSPACE, HarborTask, TaskFile

TIMEOUT_S = 60.0


def place(files: tuple[TaskFile, ...], under: str, folder: Path) -> None:
    """Write each file of `files` (its path under `under`) into `folder`."""
    for f in files:
        rel = f.path.removeprefix(under).lstrip("/") if under else f.path
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.content)
        if f.executable:
            path.chmod(0o755)


def folders(task: HarborTask, root: Path) -> tuple[Path, Path, Path, Path]:
    """(workspace, tests, verifier output, solution) of `task` under `root`, files placed."""
    work, tests, logs, solution = root / "app", root / "tests", root / "logs" / "verifier", root / "solution"
    for path in (work, tests, logs, solution):
        path.mkdir(parents=True, exist_ok=True)
    place(task.files, WORKSPACE, work)
    place(task.tests, TESTS, tests)
    place(task.solution, "", solution)
    return work, tests, logs, solution


def environ(work: Path, logs: Path) -> dict[str, str]:
    return {**os.environ, "TURNRL_WORKSPACE": str(work), "TURNRL_VERIFIER_DIR": str(logs), "HOME": str(work)}


def bash(
    script: Path, work: Path, logs: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script)],
        cwd=work,
        env={**environ(work, logs), **(extra or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def run_local(task: HarborTask, solve: bool = True) -> Verdict:
    """Solve the task with solution/solve.sh (or leave the workspace untouched with `solve=False`),
    then run tests/test.sh, in a temporary folder; the reward as `reward_of` reads it."""
    with tempfile.TemporaryDirectory(prefix="harbor-") as tmp:
        work, tests, logs, solution = folders(task, Path(tmp))
        if solve:
            done = bash(solution / "solve.sh", work, logs)
            if done.returncode != 0:
                return Verdict(
                    0.0,
                    f"harbor task '{task.name}': solve.sh exited {done.returncode}: {done.stderr.strip()[-200:]}",
                    False,
                )
        return verify(task, work, tests, logs)


def verify(task: HarborTask, work: Path, tests: Path, logs: Path) -> Verdict:
    """Run the task's tests/test.sh on the workspace `work` as it is; the reward as `reward_of` reads it."""
    try:
        ran = bash(tests / "test.sh", work, logs, dict(task.verifier_env))
    except subprocess.TimeoutExpired:
        return reward_of(task.name, VerifierOutput(None, timed_out=True), TIMEOUT_S)
    txt, js = logs / "reward.txt", logs / "reward.json"
    out = VerifierOutput(
        exit_code=ran.returncode,
        reward_txt=txt.read_text() if txt.is_file() else None,
        reward_json=js.read_text() if js.is_file() else None,
        stderr=ran.stderr,
    )
    return reward_of(task.name, out, task.verifier_timeout_s)


def check_output(task: HarborTask) -> str | None:
    """What the task's `[metadata] check_command` prints in the solved workspace (stdout and stderr
    together), or None when it has none."""
    check = task.metadata.get("check_command")
    if not check:
        return None
    with tempfile.TemporaryDirectory(prefix="harbor-") as tmp:
        work, _, logs, solution = folders(task, Path(tmp))
        bash(solution / "solve.sh", work, logs)
        done = subprocess.run(
            ["bash", "-c", str(check)],
            cwd=work,
            env={**environ(work, logs), "PYTHONDONTWRITEBYTECODE": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
        )
        return done.stdout
