"""Built-in tasks: one module per task holding everything the task is, and the one table the rest
of turnrl reads.

    addition    single-digit sums; the default task                         tasks/addition.py
    calculator  large products, solved with the calculator tool             tasks/calculator.py
    code        small stdin/stdout programs, tested in the sandbox          tasks/code/
    search      questions over a corpus of invented facts, with demos       tasks/search/
    harbor      45 small Python repositories in Harbor's task format        tasks/harbor/

and `reasoning_gym:<dataset>`: any of reasoning-gym's procedural datasets (`chain_sum`,
`basic_arithmetic`, ...), built on demand by `get` (tasks/gym.py; needs `pip install -e ".[gym]"`).

Who reads `TASKS`: a run without data files writes its task's rows (`write_task`, called where
the run is assembled); the run's reward routes each task's `data_source` to its scorer
(`scorers()`, passed to `RuleReward`: the reward layer below does not know the tasks); an agent
run's search tool serves the search task's index (`search.corpus.builtin_index`, passed to the
tool set); `turnrl data task NAME` writes the files a user can read.

A task's rows are a pure function of (split, seed, args): the same seed and task arguments
(`data.task_args`, `turnrl data task --arg KEY=VALUE`) give the same rows, byte for byte, in the
same order. A task rejects an argument it does not know (`args.reject_unknown`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.rewards.registry import ScoreFn
from turnrl.tasks import addition, calculator, code, gym, harbor, search
from turnrl.tasks.harbor import folder
from turnrl.tasks.search import demos

SPLITS = ("train", "val")
Rows = list[dict[str, Any]]


class UnknownTask(TurnrlInputError):
    """A task name that is not in `TASKS`; the message lists the known ones."""


@dataclass(frozen=True)
class Task:
    """What a built-in task is, as the rest of turnrl reads it."""

    name: str
    summary: str
    data_sources: tuple[str, ...]
    """The `data_source` of its rows: what the reward routes to `scorer`."""
    rows: Callable[..., Rows]
    """`rows(split, seed, **args)`, split in `SPLITS`, args the task's arguments (`data.task_args`):
    verl-format rows in a fixed order; an argument the task does not take is a `TaskArgError`."""
    scorer: ScoreFn
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info=None)`."""
    tools: tuple[str, ...] = ()
    """The agent tools its prompt asks for (`rollout.multi_turn.tools` in its recipe)."""
    corpus: Callable[..., tuple[Path, ...]] | None = None
    """`corpus(out_dir, **args)` writes its corpus into a folder, when it searches one; returns the files written, first
    `corpus.jsonl` (rows `{id, contents}`, title on the first line: what `turnrl retriever index
    --corpus` reads)."""
    demos: Callable[..., tuple[Rows, Any]] | None = None
    """Its demonstrations generator for supervised fine-tuning, when it has one."""


TASKS: dict[str, Task] = {
    "addition": Task(
        "addition", "single-digit sums with the answer in <answer> tags (the default task)",
        (addition.DATA_SOURCE,), addition.rows, addition.compute_score,
    ),
    "calculator": Task(
        "calculator", "3-4 digit products, solved by calling the calculator tool",
        (calculator.DATA_SOURCE,), calculator.rows, calculator.compute_score, tools=("calculator",),
    ),
    "code": Task(
        "code", "32 small stdin/stdout problems in 7 families, 10 hidden tests each, run in the sandbox; "
        "validation on held-out problems and held-out families", code.DATA_SOURCES, code.rows, code.compute_score,
        tools=("python",), demos=code.demonstrations,
    ),
    "search": Task(
        "search", "one-hop, two-hop and comparison questions about invented entities that only a "
        "search of its corpus answers; validation on a world of entities training never names",
        search.DATA_SOURCES, search.rows, search.compute_score, tools=("search",),
        corpus=search.write_corpus, demos=demos.build,
    ),
    "harbor": Task(
        "harbor", "45 small Python repositories in Harbor's task format (fix a bug, implement what the tests "
        "describe, refactor with the behaviour kept), verified in a sandbox session; validation on held-out "
        "tasks and a held-out family", harbor.DATA_SOURCES, harbor.rows, harbor.compute_score,
        tools=("bash", "editor"), demos=harbor.demonstrations,
    ),
}  # fmt: skip


def get(name: str) -> Task:
    """A built-in task, or `reasoning_gym:<dataset>` (GymNotInstalled without the package,
    UnknownGymDataset for a name it does not know)."""
    if gym.is_gym(name):
        return gym_task(gym.dataset_of(name))
    if folder.is_folder_task(name):
        return harbor_folder_task(name)
    if name not in TASKS:
        raise UnknownTask(
            f"unknown built-in task '{name}'; valid: {', '.join(TASKS)}, reasoning_gym:<dataset>, "
            "or harbor:<folder of task directories>"
        )
    return TASKS[name]


def harbor_folder_task(name: str) -> Task:
    """`harbor:<folder>`: a user's Harbor task directories (tasks/harbor/folder.py)."""
    where = folder.folder_of(name)
    if not where.is_dir():
        raise UnknownTask(f"data.task={name}: {where} is not a folder of Harbor task directories")
    return Task(
        name,
        f"the Harbor tasks under {where}",
        (folder.SOURCE, folder.HELD_OUT),
        partial(folder.rows, where),
        harbor.compute_score,
        tools=("bash", "editor"),
    )


def gym_task(dataset: str) -> Task:
    gym.check_dataset(dataset)
    return Task(
        gym.PREFIX + dataset,
        f"reasoning-gym's '{dataset}' problems, the answer in <answer> tags",
        (gym.data_source(dataset),),
        partial(gym.rows, dataset),
        gym.compute_score,
    )


def scorers() -> dict[str, ScoreFn]:
    """`data_source` -> scorer of every built-in task: the entries a run adds to the reward table.
    `reasoning_gym/*` stands for every reasoning-gym dataset's source (`registry.resolve` falls back
    to a source's family): one scorer reads the dataset's name from each row."""
    table = {source: task.scorer for task in TASKS.values() for source in task.data_sources}
    return {**table, gym.SOURCE_FAMILY: gym.compute_score}


def write_jsonl(path: Path, rows: Rows) -> Path:
    """One JSON object per line, written under a temporary name and renamed into place, so a reader
    (or a second run writing the same cache) never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


@dataclass(frozen=True)
class TaskFiles:
    train: Path
    val: Path
    corpus_files: tuple[Path, ...] = ()
    """The corpus and what else its writer wrote (empty without a corpus)."""

    @property
    def corpus(self) -> Path | None:
        return self.corpus_files[0] if self.corpus_files else None

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.train, self.val, *self.corpus_files)


def write_task(
    name: str,
    out_dir: str | Path,
    seed: int,
    with_corpus: bool = False,
    args: Mapping[str, Any] | None = None,
) -> TaskFiles:
    """`train.jsonl` and `val.jsonl` of task `name` into `out_dir`; with `with_corpus`, also its
    corpus (`corpus.jsonl`, and what else its writer writes) when it has one. `args`: the task's
    arguments, passed to its `rows` and `corpus`."""
    task, out, kw = get(name), Path(out_dir), dict(args or {})
    # both splits are made before either is written: a rejected argument leaves no half-written folder
    train_rows, val_rows = task.rows("train", seed, **kw), task.rows("val", seed, **kw)
    train = write_jsonl(out / "train.jsonl", train_rows)
    val = write_jsonl(out / "val.jsonl", val_rows)
    docs = task.corpus(out, **kw) if with_corpus and task.corpus is not None else ()
    return TaskFiles(train, val, docs)
