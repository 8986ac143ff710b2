"""The built-in Harbor tasks (`builtin/<family>/<task>/`), their split, rows and demonstrations.

Each task is a small Python repository (1-4 files) with a fix-the-bug, implement-what-the-tests-
describe or keep-the-behaviour refactor to do; its verifier runs hidden unittest tests with plain
`python3` (no pytest needed in the sandbox) and writes 1 or 0 to reward.txt.

**Split.** Training rows come from 5 families (`TRAIN_FAMILIES`) less 2 held-out tasks of each
(`HELD_OUT_TASKS`); validation asks two things apart, by `data_source`:
- `turnrl/harbor/new_task`: the held-out tasks of the training families;
- `turnrl/harbor/new_family`: every task of `encoding`, a family no training row shows.
No validation task is trained on or demonstrated.
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path
from typing import Any

from turnrl.agent.harbor import demos, local
from turnrl.agent.harbor.reader import make_row, read_tasks
from turnrl.agent.harbor.spec import HarborTask, HarborTaskError
from turnrl.tasks.args import count_arg, reject_unknown

ROOT = Path(__file__).parent / "builtin"
DATA_SOURCE = "turnrl/harbor"
VAL_SOURCES = {"new_task": f"{DATA_SOURCE}/new_task", "new_family": f"{DATA_SOURCE}/new_family"}
DATA_SOURCES = (DATA_SOURCE, *VAL_SOURCES.values())
TRAIN_FAMILIES = ("strings", "collections", "parsing", "numbers", "classes")
VAL_FAMILIES = ("encoding",)
HELD_OUT_TASKS = (
    "strings/wrap_words",
    "strings/camel_to_snake",
    "collections/rotate_list",
    "collections/merge_intervals",
    "parsing/parse_duration",
    "parsing/roman_numerals",
    "numbers/median_fix",
    "numbers/add_business_days",
    "classes/lru_cache",
    "classes/stack_peek",
)
"""`family/task` of the training families' tasks kept for validation."""
TASK_ARGS = ("n_train",)


@cache
def builtin_tasks() -> tuple[tuple[str, HarborTask], ...]:
    """(`family/task`, task) of every built-in task, in name order; a refused one is a bug here."""
    out = []
    for family in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        read = read_tasks(family)
        if read.refused:
            raise HarborTaskError(family.name, f"built-in task refused: {read.refused[0]}")
        out += [(f"{family.name}/{t.name}", t) for t in read.tasks]
    return tuple(out)


def split_of(key: str) -> str:
    """ "train" or the validation source's key ("new_task", "new_family") of a `family/task`."""
    family = key.split("/", 1)[0]
    if family in VAL_FAMILIES:
        return "new_family"
    return "new_task" if key in HELD_OUT_TASKS else "train"


def train_tasks() -> list[tuple[str, HarborTask]]:
    return [(k, t) for k, t in builtin_tasks() if split_of(k) == "train"]


def val_tasks() -> list[tuple[str, HarborTask]]:
    return [(k, t) for k, t in builtin_tasks() if split_of(k) != "train"]


def row(key: str, task: HarborTask, source: str, split: str, index: int) -> dict[str, Any]:
    family = key.split("/", 1)[0]
    kind = task.metadata.get("kind", "")
    return make_row(task, source, split, index, family=family, kind=kind)


def rows(split: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """`train`: `n_train` rows (default: each training task once), the training tasks in rounds,
    each round in an order drawn from `seed`; `val`: every held-out task once, in name order,
    indexed after the training rows."""
    reject_unknown(args, TASK_ARGS, "harbor")
    train = train_tasks()
    n_train = count_arg(args, "n_train", len(train), "harbor")
    if split == "train":
        rng, order = random.Random(seed), []
        while len(order) < n_train:
            order += rng.sample(train, len(train))
        return [row(k, t, DATA_SOURCE, "train", i) for i, (k, t) in enumerate(order[:n_train])]
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return [row(k, t, VAL_SOURCES[split_of(k)], "test", n_train + i) for i, (k, t) in enumerate(val_tasks())]


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float]:
    """verl's signature, for the reward table's sake: a Harbor task's reward is its verifier's, run in
    the episode's sandbox session (`harbor.verify`), which a response's text alone cannot give."""
    raise HarborTaskError(
        str(ground_truth),
        "scored by its verifier in the episode's sandbox session (turnrl.agent.harbor.reward.verify), "
        "not from the response text",
    )


def demonstrations(
    n: int | None = None, seed: int = 0, **args: Any
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Scripted episodes (`demos.demonstration`) of the first `n` training rows of `seed` (all of
    them when None), each row the RL row plus `messages` and `tools`; the check's output is really
    run here (`local.check_output`). Returns the rows and demonstrations per task."""
    count = n if n is not None else int(args.pop("n_train", len(train_tasks())))
    args.pop("n_train", None)
    train = rows("train", seed, n_train=count, **args)
    by_name = {t.name: t for _, t in train_tasks()}
    outputs: dict[str, str | None] = {}
    report: dict[str, int] = {}
    for r in train:
        task = by_name[r["extra_info"]["task"]]
        if task.name not in outputs:
            outputs[task.name] = local.check_output(task)
        r["messages"] = demos.demonstration(task, r["prompt"], outputs[task.name])
        r["tools"] = demos.TOOLS
        report[task.name] = report.get(task.name, 0) + 1
    return train, report
