"""Coding tasks in Harbor's task format, run in sandbox sessions.

A task is a directory:

    instruction.md        what the agent is asked
    task.toml             [agent] / [verifier] timeout_sec, [environment] resources, [metadata]
    environment/          the workspace's starting files (and a Dockerfile of FROM/WORKDIR/COPY only)
    tests/test.sh         the verifier: run as `bash /tests/test.sh` once the agent has finished;
                          writes /logs/verifier/reward.txt (or reward.json), else its exit status counts
    solution/solve.sh     the reference solution

`read_task` / `read_tasks` (reader.py) read directories into `HarborTask`s, refusing in one line
what one sandbox session cannot provide (dockerfile.py, reader.check_environment); `make_row` turns a
task into a verl row whose `extra_info["harbor"]` carries the workspace files, the tests and the
timeouts (`task_from_row` reads them back). `verify` (reward.py) places the tests in a session,
runs the verifier and reads its reward (`reward_of`, pure); `oracle` plays solve.sh first.
`demos.demonstration` turns a scripted solve.sh into a tool-call episode for SFT.

The built-in tasks (builtin.py, files under `builtin/<family>/<task>/`) are `data.task=harbor`.
"""

from turnrl.tasks.harbor.builtin import (
    DATA_SOURCE,
    DATA_SOURCES,
    HELD_OUT_TASKS,
    TRAIN_FAMILIES,
    VAL_FAMILIES,
    VAL_SOURCES,
    builtin_tasks,
    compute_score,
    demonstrations,
    rows,
)
from turnrl.tasks.harbor.demos import DemoError, demonstration, parse_solve
from turnrl.tasks.harbor.reader import ReadResult, make_row, read_task, read_tasks, task_from_row
from turnrl.tasks.harbor.reward import Verdict, VerifierOutput, oracle, reward_of, verify
from turnrl.tasks.harbor.spec import HarborTask, HarborTaskError, Limits, TaskFile

__all__ = [
    "DATA_SOURCE",
    "DATA_SOURCES",
    "HELD_OUT_TASKS",
    "TRAIN_FAMILIES",
    "VAL_FAMILIES",
    "VAL_SOURCES",
    "DemoError",
    "HarborTask",
    "HarborTaskError",
    "Limits",
    "ReadResult",
    "TaskFile",
    "Verdict",
    "VerifierOutput",
    "builtin_tasks",
    "compute_score",
    "demonstration",
    "demonstrations",
    "make_row",
    "oracle",
    "parse_solve",
    "read_task",
    "read_tasks",
    "reward_of",
    "rows",
    "task_from_row",
    "verify",
]  # fmt: skip
