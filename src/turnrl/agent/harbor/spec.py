"""A Harbor task as turnrl holds it, the sandbox limits a task is checked against, and the one-line error
every refusal raises."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from turnrl.errors import TurnrlInputError

WORKSPACE = "/app"
"""Where the agent works: every sandbox command's working directory."""
TESTS = "/tests"
"""Where the verifier's files are placed once the agent has finished."""
VERIFIER_DIR = "/logs/verifier"
"""Where a verifier writes `reward.txt` or `reward.json`."""
DEFAULT_AGENT_TIMEOUT_S = 600.0
"""An episode's wall-clock budget when task.toml gives no `[agent] timeout_sec`."""
DEFAULT_VERIFIER_TIMEOUT_S = 120.0
"""`bash /tests/test.sh`'s budget when task.toml gives no `[verifier] timeout_sec`."""


class HarborTaskError(TurnrlInputError):
    """A task directory turnrl cannot run: one line, `harbor task 'NAME': <what it needs>`."""

    def __init__(self, task: str, need: str) -> None:
        super().__init__(f"harbor task '{task}': {need}")
        self.task, self.need = task, need


@dataclass(frozen=True)
class Limits:
    """What one sandbox session offers; a task asking for more is refused. The defaults are the
    sandbox server's own (`max_run_timeout` 300 s, `max_memory_MB` 16384)."""

    verifier_timeout_s: float = 300.0
    """The longest single command the sandbox runs: the verifier is one command."""
    memory_mb: int = 16_384
    cpus: float = 4.0
    workspace_bytes: int = 8 * 2**20
    """Starting files, tests and solution together: they travel in every row and every request."""


@dataclass(frozen=True)
class TaskFile:
    """One file to place in the sandbox: `path` is absolute (`/app/src/x.py`, `/tests/test.sh`)."""

    path: str
    content: bytes
    executable: bool = False

    def to_json(self) -> dict[str, Any]:
        """A row's form: text stays readable; anything not UTF-8 is base64."""
        try:
            text, encoding = self.content.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(self.content).decode("ascii"), "base64"
        return {"path": self.path, "content": text, "encoding": encoding, "executable": self.executable}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskFile:
        raw = str(data["content"])
        content = base64.b64decode(raw) if data.get("encoding") == "base64" else raw.encode("utf-8")
        return cls(str(data["path"]), content, bool(data.get("executable", False)))


@dataclass(frozen=True)
class HarborTask:
    """Everything a rollout needs to run one task: the instruction, the workspace's starting files,
    the verifier's files, the reference solution, and both timeouts."""

    name: str
    instruction: str
    files: tuple[TaskFile, ...]
    """The starting state of the workspace, every path under `WORKSPACE`."""
    tests: tuple[TaskFile, ...]
    """tests/ of the task, every path under `TESTS`; `TESTS/test.sh` is the verifier."""
    solution: tuple[TaskFile, ...] = ()
    """solution/ of the task, paths relative to it (`solve.sh` first when present)."""
    agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    verifier_timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S
    verifier_env: tuple[tuple[str, str], ...] = ()
    """`[verifier] env`: variables set for test.sh."""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    """`[metadata]` as written (difficulty, category, ...; turnrl reads `check_command`)."""

    def solve_sh(self) -> str | None:
        """The text of solution/solve.sh, or None without one."""
        found = [f for f in self.solution if f.path == "solve.sh"]
        return found[0].content.decode("utf-8") if found else None

    def workspace_files(self) -> dict[str, bytes]:
        """`{path: content}` for `create_session(files=...)`."""
        return {f.path: f.content for f in self.files}

    def to_json(self) -> dict[str, Any]:
        """The task as a row's `extra_info["harbor"]` holds it: lists of fixed-shape records, so a
        parquet file of many tasks keeps one schema."""
        return {
            "name": self.name,
            "workdir": WORKSPACE,
            "files": [f.to_json() for f in self.files],
            "tests": [f.to_json() for f in self.tests],
            "solution": [f.to_json() for f in self.solution],
            "agent_timeout_s": self.agent_timeout_s,
            "verifier_timeout_s": self.verifier_timeout_s,
            "verifier_env": [{"name": k, "value": v} for k, v in self.verifier_env],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], instruction: str = "") -> HarborTask:
        return cls(
            name=str(data["name"]),
            instruction=instruction,
            files=tuple(TaskFile.from_json(f) for f in data.get("files", ())),
            tests=tuple(TaskFile.from_json(f) for f in data.get("tests", ())),
            solution=tuple(TaskFile.from_json(f) for f in data.get("solution", ())),
            agent_timeout_s=float(data.get("agent_timeout_s", DEFAULT_AGENT_TIMEOUT_S)),
            verifier_timeout_s=float(data.get("verifier_timeout_s", DEFAULT_VERIFIER_TIMEOUT_S)),
            verifier_env=tuple((str(e["name"]), str(e["value"])) for e in data.get("verifier_env", ())),
        )


def size_mb(value: Any, what: str, task: str) -> float:
    """A size in MB from `memory_mb = 2048` (a number of MB) or `memory = "2G"` (a string with a unit:
    K, M, G or T, optionally followed by B or iB)."""
    if isinstance(value, bool):
        raise HarborTaskError(task, f"task.toml: {what} must be a size, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
    unit = text[-1:] if text[-1:] in scale else "M"
    number = text[:-1] if text[-1:] in scale else text
    try:
        return float(number) * scale[unit]
    except ValueError:
        raise HarborTaskError(
            task, f"task.toml: {what} {value!r} is not a size such as 2048 or '2G'"
        ) from None
