"""Built-in tasks: offline datasets written as verl-format JSONL, each with its own scorer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from turnrl.data.dataset import DataError
from turnrl.data.tasks import addition, calculator, code, search

# name -> writer(out_dir, seed) -> (train_file, val_file)
TASKS: dict[str, Callable[[Path, int], tuple[Path, Path]]] = {
    "addition": addition.write,
    "calculator": calculator.write,
    "code": code.write,
    "search": search.write,
}


def write_task(name: str, out_dir: str | Path, seed: int) -> tuple[Path, Path]:
    if name not in TASKS:
        raise DataError(f"unknown built-in task '{name}'; valid: {', '.join(TASKS)}")
    return TASKS[name](Path(out_dir), seed)
