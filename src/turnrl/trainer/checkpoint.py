"""Checkpoints: the driver coordinates, each role writes its own state.

    <run>/checkpoints/step_<N>/
        trainer_state.json      step, data position, KL coefficient, policy version
        actor/ reference/ critic/ reward_model/    what each role's `save(dir)` writes

The directory is written under a temporary name and renamed when complete, and `latest`
is replaced last, so a run killed mid-save resumes from the previous checkpoint instead of
a half-written one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from turnrl.workers.group import WorkerGroup
from turnrl.workers.state import CheckpointError

log = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"


def save(run_dir: Path, step: int, roles: dict[str, WorkerGroup], trainer_state: dict[str, Any]) -> Path:
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, group in roles.items():
        group.call("save", tmp / name)
    (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")
    return final


def latest(run_dir: Path) -> Path | None:
    """The checkpoint the `latest` pointer names; if it is gone or incomplete (deleted by hand, a
    disk that lost it), the newest complete one, said out loud: never a silent start from scratch."""
    pointer = run_dir / "checkpoints" / "latest"
    if pointer.is_file():
        path = run_dir / "checkpoints" / pointer.read_text().strip()
        if (path / TRAINER_STATE).is_file():
            return path
    found = steps(run_dir)
    if not found:
        return None
    newest = found[max(found)]
    log.warning("checkpoint pointer %s is missing or names no complete checkpoint; using %s", pointer, newest)
    return newest


def steps(run_dir: Path) -> dict[int, Path]:
    """Every complete checkpoint of a run, by step."""
    root = run_dir / "checkpoints"
    out: dict[int, Path] = {}
    for p in root.glob("step_*") if root.is_dir() else []:
        suffix = p.name.removeprefix("step_")
        if suffix.isdigit() and (p / TRAINER_STATE).is_file():
            out[int(suffix)] = p
    return dict(sorted(out.items()))


def load(path: Path, roles: dict[str, WorkerGroup]) -> dict[str, Any]:
    """Each role restores its own state from `path/<role>`; returns the trainer state."""
    for name, group in roles.items():
        if not (path / name).is_dir():
            raise CheckpointError(
                f"checkpoint {path} has no '{name}' state; was it written by another setup?"
            )
        group.call("load", path / name)
    return json.loads((path / TRAINER_STATE).read_text())
