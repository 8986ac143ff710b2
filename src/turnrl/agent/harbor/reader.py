"""Reading Harbor task directories: `read_task` (one), `read_tasks` (a folder of them, with one line
per refused task) and `make_row` (a task as a verl row)."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.agent.harbor.dockerfile import context_files, starting_files
from turnrl.agent.harbor.spec import (
    DEFAULT_AGENT_TIMEOUT_S,
    DEFAULT_VERIFIER_TIMEOUT_S,
    TESTS,
    HarborTask,
    HarborTaskError,
    Limits,
    TaskFile,
    size_mb,
)

PREAMBLE = (
    "You are working in a Linux shell, in the folder {workdir}. Use the tools to read and change files "
    "and to run commands; when you are done, say so. Your work is checked by tests you cannot see.\n"
    'Call a tool by writing <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>. Tools:\n'
    '- bash {{"command"}}: run a shell command in {workdir};\n'
    '- editor {{"command": "view" | "create" | "str_replace", "path", "file_text", '
    '"old_str", "new_str"}}: view a file, create one, or replace a string that occurs once.\n\n'
)
"""What every row's prompt says before the task's own instruction."""
DEFAULT_LIMITS = Limits()


def load_toml(task: str, path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}  # Harbor's defaults throughout
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HarborTaskError(task, f"task.toml does not parse: {first}") from None


def section(task: str, config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise HarborTaskError(task, f"task.toml: [{name}] must be a table")
    return value


def seconds(task: str, table: dict[str, Any], name: str, default: float) -> float:
    value = table.get("timeout_sec", default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise HarborTaskError(
            task, f"task.toml: [{name}] timeout_sec must be a positive number, got {value!r}"
        )
    return float(value)


def check_environment(task: str, env: dict[str, Any], limits: Limits) -> None:
    """Refuse what one sandbox session cannot give: internet, GPUs, a prebuilt image, more memory or
    CPUs than its limits."""
    if env.get("allow_internet") is True:
        raise HarborTaskError(task, "needs internet access (allow_internet = true); the sandbox has none")
    if env.get("docker_image"):
        raise HarborTaskError(task, f"needs the image {env['docker_image']} (docker_image)")
    if env.get("gpus"):
        raise HarborTaskError(task, f"needs {env['gpus']} GPU(s); the sandbox has none")
    memory = env.get("memory_mb", env.get("memory"))
    if memory is not None and size_mb(memory, "memory", task) > limits.memory_mb:
        raise HarborTaskError(
            task,
            f"needs {size_mb(memory, 'memory', task):g} MB of memory; the sandbox allows {limits.memory_mb}",
        )
    cpus = env.get("cpus")
    if isinstance(cpus, int | float) and not isinstance(cpus, bool) and cpus > limits.cpus:
        raise HarborTaskError(task, f"needs {cpus:g} CPUs; the sandbox allows {limits.cpus:g}")


def task_name(directory: Path, config: dict[str, Any]) -> str:
    """`[task] name` of a newer task.toml, else the directory's name."""
    table = config.get("task")
    named = table.get("name") if isinstance(table, dict) else None
    return str(named) if named else directory.name


def folder_files(folder: Path, root: str) -> tuple[TaskFile, ...]:
    """Every file of `folder`, placed under `root` (`""`: paths relative to it)."""
    out = []
    for path in context_files(folder) if folder.is_dir() else []:
        rel = path.relative_to(folder).as_posix()
        out.append(
            TaskFile(f"{root}/{rel}" if root else rel, path.read_bytes(), bool(path.stat().st_mode & 0o111))
        )
    return tuple(out)


def check_size(task: HarborTask, limits: Limits) -> None:
    total = sum(len(f.content) for f in (*task.files, *task.tests, *task.solution))
    if total > limits.workspace_bytes:
        raise HarborTaskError(
            task.name,
            f"its files take {total / 2**20:.1f} MB; the limit is {limits.workspace_bytes / 2**20:g} MB",
        )


def read_task(directory: str | Path, limits: Limits = DEFAULT_LIMITS) -> HarborTask:
    """One task directory, or HarborTaskError (one line naming the task and what it needs)."""
    directory = Path(directory)
    config = load_toml(directory.name, directory / "task.toml")
    name = task_name(directory, config)
    if "steps" in config:
        raise HarborTaskError(name, "needs several steps ([[steps]]); one episode is one step")
    if not (directory / "instruction.md").is_file():
        raise HarborTaskError(name, "no instruction.md")
    if not (directory / "tests" / "test.sh").is_file():
        raise HarborTaskError(name, "no tests/test.sh")
    check_environment(name, section(name, config, "environment"), limits)
    verifier = section(name, config, "verifier")
    verifier_timeout = seconds(name, verifier, "verifier", DEFAULT_VERIFIER_TIMEOUT_S)
    if verifier_timeout > limits.verifier_timeout_s:
        raise HarborTaskError(
            name,
            f"needs a {verifier_timeout:g} s verifier; the sandbox runs a command for at most {limits.verifier_timeout_s:g} s",
        )
    env = verifier.get("env", {})
    if not isinstance(env, dict):
        raise HarborTaskError(name, "task.toml: [verifier] env must be a table of variables")
    placed = starting_files(name, directory / "environment")
    task = HarborTask(
        name=name,
        instruction=(directory / "instruction.md").read_text(encoding="utf-8"),
        files=tuple(
            TaskFile(path, src.read_bytes(), bool(src.stat().st_mode & 0o111))
            for path, src in sorted(placed.items())
        ),
        tests=folder_files(directory / "tests", TESTS),
        solution=folder_files(directory / "solution", ""),
        agent_timeout_s=seconds(name, section(name, config, "agent"), "agent", DEFAULT_AGENT_TIMEOUT_S),
        verifier_timeout_s=verifier_timeout,
        verifier_env=tuple((str(k), str(v)) for k, v in sorted(env.items())),
        metadata=section(name, config, "metadata"),
    )
    check_size(task, limits)
    return task


@dataclass(frozen=True)
class ReadResult:
    tasks: tuple[HarborTask, ...]
    refused: tuple[str, ...]
    """One line per task directory that was not read: `harbor task 'NAME': what it needs`."""


def is_task_dir(path: Path) -> bool:
    return path.is_dir() and any((path / n).exists() for n in ("task.toml", "instruction.md", "tests"))


def read_tasks(root: str | Path, limits: Limits = DEFAULT_LIMITS) -> ReadResult:
    """Every task directory under `root` (itself one, or a folder of them), in name order; a refused
    task is skipped and named in `refused`, never fatal to the others."""
    root = Path(root)
    if not root.is_dir():
        raise HarborTaskError(root.name, f"{root} is not a folder of task directories")
    dirs = [root] if (root / "task.toml").is_file() else sorted(p for p in root.iterdir() if is_task_dir(p))
    tasks, refused = [], []
    for directory in dirs:
        try:
            tasks.append(read_task(directory, limits))
        except HarborTaskError as err:
            refused.append(str(err))
    return ReadResult(tuple(tasks), tuple(refused))


def prompt(task: HarborTask) -> str:
    return PREAMBLE.format(workdir="/app") + task.instruction.strip() + "\n"


def make_row(task: HarborTask, data_source: str, split: str, index: int, **info: Any) -> dict[str, Any]:
    """One verl row: the instruction as the prompt, the task's name as the ground truth, and in
    `extra_info["harbor"]` what a rollout needs to create the workspace, place the tests after the
    episode and bound both by their timeouts (`HarborTask.from_json` reads it back)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": prompt(task)}],
        "ability": "agent",
        "reward_model": {"style": "harbor", "ground_truth": task.name},
        "extra_info": {"split": split, "index": index, "task": task.name, **info, "harbor": task.to_json()},
    }


def task_from_row(row: dict[str, Any]) -> HarborTask:
    """The task a row made by `make_row` carries (its instruction read from the prompt)."""
    prompt = row.get("prompt", row.get("raw_prompt"))  # a dataset row's, or a batch row's
    content = prompt[-1]["content"]
    return HarborTask.from_json(row["extra_info"]["harbor"], instruction=content)
