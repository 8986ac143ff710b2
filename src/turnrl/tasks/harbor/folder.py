"""`data.task=harbor:<folder>`: a user's own Harbor task directories as a task.

Every task directory under the folder is read (`turnrl.agent.harbor.read_tasks`); one the sandbox
cannot run is refused in one line naming it and what it needs, logged, and left out; a folder that
leaves none stops the run in one line. Validation holds tasks out whole: those of `val_dir` when it
is given (`data.task_args.val_dir`), else a `val_share` of the folder's tasks (default 0.2, at least
one when there are two or more) chosen by a hash of each task's name, so the split does not move
with the seed or with tasks added later. Training rows are the other tasks, each round in an order
drawn from the seed (`n_train` rows; default one round).
"""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path
from typing import Any

from turnrl.agent.harbor.reader import make_row, read_tasks
from turnrl.agent.harbor.spec import HarborTask, HarborTaskError
from turnrl.tasks.args import count_arg, reject_unknown
from turnrl.tasks.harbor.builtin import DATA_SOURCE, VAL_SOURCES

PREFIX = "harbor:"
SOURCE, HELD_OUT = DATA_SOURCE, VAL_SOURCES["new_task"]
"""The built-in tasks' sources: the same verifier reward, and validation metrics under `new_task`."""
TASK_ARGS = ("n_train", "val_share", "val_dir")
log = logging.getLogger(__name__)


def is_folder_task(name: str) -> bool:
    return name.startswith(PREFIX) and len(name) > len(PREFIX)


def folder_of(name: str) -> Path:
    return Path(name[len(PREFIX) :]).expanduser()


_said: set[str] = set()
"""Refusals already logged: each split reads the folder, a refusal is said once."""


def _read(folder: Path) -> list[HarborTask]:
    result = read_tasks(folder)
    for line in result.refused:
        said = f"{PREFIX}{folder}: left out: {line}"
        if said not in _said:
            _said.add(said)
            log.warning("%s", said)
    return list(result.tasks)


def held_out_key(name: str) -> float:
    """A task's place in [0, 1): the same for its name whatever else the folder holds."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:12], 16) / 16**12


def split(tasks: list[HarborTask], share: float) -> tuple[list[HarborTask], list[HarborTask]]:
    """(train, val): the `share` of tasks with the lowest `held_out_key` held out, at least one of two+."""
    if not 0 <= share < 1:
        raise HarborTaskError("data.task_args", f"val_share must be in [0, 1), got {share}")
    ranked = sorted(tasks, key=lambda t: held_out_key(t.name))
    n_val = max(1 if len(tasks) >= 2 and share > 0 else 0, round(share * len(tasks)))
    val = sorted(ranked[:n_val], key=lambda t: t.name)
    return [t for t in tasks if t not in val], val


def rows(folder: Path, split_name: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """verl rows of the folder's tasks (module docstring)."""
    reject_unknown(args, TASK_ARGS, PREFIX + str(folder))
    tasks = _read(folder)
    if args.get("val_dir"):
        train, val = tasks, _read(Path(str(args["val_dir"])).expanduser())
    else:
        train, val = split(tasks, float(args.get("val_share", 0.2)))
    if not train:
        raise HarborTaskError(
            str(folder), "no task to train on (every task directory was refused or held out)"
        )
    n_train = count_arg(args, "n_train", len(train), PREFIX + str(folder))
    if split_name == "train":
        rng, order = random.Random(seed), []
        while len(order) < n_train:
            order += rng.sample(train, len(train))
        return [make_row(t, SOURCE, "train", i) for i, t in enumerate(order[:n_train])]
    if split_name != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split_name!r}")
    return [make_row(t, HELD_OUT, "test", n_train + i) for i, t in enumerate(val)]
