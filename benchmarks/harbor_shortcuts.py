"""The shortcut baselines of the built-in Harbor tasks' held-out split: what a coding agent scores on
each held-out task without solving it.

    python benchmarks/harbor_shortcuts.py

- **empty attempt**: the workspace left as the task gives it, then the task's tests.
- **the oracle of the nearest training task**: the training task whose instruction shares the most
  words with the held-out one's (Jaccard over lower-cased words; any family, so the held-out family
  `encoding` gets one too) has its reference `solution/solve.sh` run in the held-out task's
  workspace, then the held-out task's tests. This is what a policy that memorised the training
  solutions and picked the closest one would score.

Each runs in a plain temporary folder (`turnrl.agent.harbor.local`: trusted built-in scripts only),
and prints one row per held-out task, then the mean of each baseline with its 95 % interval
(a bootstrap over the tasks). docs/results/harbor-agent.md quotes it."""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from turnrl.agent.harbor import local
from turnrl.agent.harbor.spec import HarborTask
from turnrl.tasks.harbor.builtin import train_tasks, val_tasks


def words(task: HarborTask) -> set[str]:
    return set(re.findall(r"[a-z_]+", task.instruction.lower()))


def nearest(task: HarborTask, pool: list[HarborTask]) -> HarborTask:
    mine = words(task)
    return max(pool, key=lambda other: len(mine & words(other)) / len(mine | words(other)))


def score(task: HarborTask, solver: HarborTask | None) -> float:
    """The task's reward after `solver`'s solve.sh ran in its workspace (None: nothing ran)."""
    with tempfile.TemporaryDirectory(prefix="harbor-shortcut-") as tmp:
        work, tests, logs, _ = local.folders(task, Path(tmp))
        if solver is not None:
            other = Path(tmp) / "other_solution"
            other.mkdir()
            local.place(solver.solution, "", other)
            with contextlib.suppress(subprocess.TimeoutExpired):  # whatever it left is scored
                local.bash(other / "solve.sh", work, logs)
        return local.verify(task, work, tests, logs).reward


def interval(values: list[float], seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    x = np.array(values)
    means = x[rng.integers(0, len(x), (10_000, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    pool = [t for _, t in train_tasks()]
    rows = []
    print(f"{'held-out task':28} {'family':12} {'empty':>6} {'nearest training task':28} {'its oracle':>10}")
    for key, task in val_tasks():
        near = nearest(task, pool)
        empty, borrowed = score(task, None), score(task, near)
        rows.append((empty, borrowed))
        print(f"{task.name:28} {key.split('/')[0]:12} {empty:>6.2f} {near.name:28} {borrowed:>10.2f}")
    for name, column in (("empty attempt", 0), ("the nearest training task's oracle", 1)):
        values = [r[column] for r in rows]
        lo, hi = interval(values)
        print(f"{name}: {np.mean(values):.3f} (95 %: {lo:.3f} to {hi:.3f}) over {len(values)} held-out tasks")


if __name__ == "__main__":
    main()
