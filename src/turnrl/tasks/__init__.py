"""Built-in tasks: one module per task holding everything the task is, and the one table the rest
of turnrl reads.

    addition    single-digit sums; the default task                         tasks/addition.py
    calculator  large products, solved with the calculator tool             tasks/calculator.py
    code        small stdin/stdout programs, tested in the sandbox          tasks/code.py
    search      questions over a corpus of invented facts, with demos       tasks/search/

Who reads `TASKS`: a run without data files writes its task's rows (`write_task`, called where
the run is assembled); the run's reward routes each task's `data_source` to its scorer
(`scorers()`, passed to `RuleReward`: the reward layer below does not know the tasks); an agent
run's search tool serves the search task's index (`search.corpus.builtin_index`, passed to the
tool set); `turnrl data task NAME` writes the files a user can read.

A task's rows are a pure function of (split, seed): the same seed gives the same rows, byte for
byte, in the same order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.rewards import code as code_reward
from turnrl.rewards import qa
from turnrl.rewards.registry import ScoreFn
from turnrl.tasks import addition, calculator, code, search
from turnrl.tasks.search import corpus, demos

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
    rows: Callable[[str, int], Rows]
    """`rows(split, seed)`, split in `SPLITS`: verl-format rows in a fixed order."""
    scorer: ScoreFn
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info=None)`."""
    tools: tuple[str, ...] = ()
    """The agent tools its prompt asks for (`rollout.multi_turn.tools` in its recipe)."""
    corpus: Callable[[Path], tuple[Path, ...]] | None = None
    """Writes its corpus into a folder, when it searches one; returns the files written, first
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
        "code", "small stdin/stdout programming problems with hidden tests, run in the sandbox",
        (code.DATA_SOURCE,), code.rows, code_reward.compute_score, tools=("python",),
    ),
    "search": Task(
        "search", "questions about invented entities that only a search of its corpus answers",
        (search.DATA_SOURCE,), search.rows, qa.compute_score, tools=("search",),
        corpus=corpus.write_task_corpus, demos=demos.build,
    ),
}  # fmt: skip


def get(name: str) -> Task:
    if name not in TASKS:
        raise UnknownTask(f"unknown built-in task '{name}'; valid: {', '.join(TASKS)}")
    return TASKS[name]


def scorers() -> dict[str, ScoreFn]:
    """`data_source` -> scorer of every built-in task: the entries a run adds to the reward table."""
    return {source: task.scorer for task in TASKS.values() for source in task.data_sources}


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


def write_task(name: str, out_dir: str | Path, seed: int, with_corpus: bool = False) -> TaskFiles:
    """`train.jsonl` and `val.jsonl` of task `name` into `out_dir`; with `with_corpus`, also its
    corpus (`corpus.jsonl`, and what else its writer writes) when it has one."""
    task, out = get(name), Path(out_dir)
    train = write_jsonl(out / "train.jsonl", task.rows("train", seed))
    val = write_jsonl(out / "val.jsonl", task.rows("val", seed))
    docs = task.corpus(out) if with_corpus and task.corpus is not None else ()
    return TaskFiles(train, val, docs)
