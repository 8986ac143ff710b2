"""The built-in coding tasks in Harbor's task format (`data.task=harbor`), run in sandbox sessions.

A task is a directory:

    instruction.md        what the agent is asked
    task.toml             [agent] / [verifier] timeout_sec, [environment] resources, [metadata]
    environment/          the workspace's starting files (and a Dockerfile of FROM/WORKDIR/COPY only)
    tests/test.sh         the verifier: run as `bash /tests/test.sh` once the agent has finished;
                          writes /logs/verifier/reward.txt (or reward.json), else its exit status counts
    solution/solve.sh     the reference solution

The format itself (reading, refusing, verifying, demonstrations) is `turnrl.agent.harbor`'s; this
package holds the built-in tasks (builtin.py, files under `builtin/<family>/<task>/`) and re-exports
the format's names.
"""

from turnrl.agent.harbor.demos import DemoError, demonstration, parse_solve
from turnrl.agent.harbor.reader import ReadResult, make_row, read_task, read_tasks, task_from_row
from turnrl.agent.harbor.reward import Verdict, VerifierOutput, oracle, reward_of, verify
from turnrl.agent.harbor.spec import HarborTask, HarborTaskError, Limits, TaskFile
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
