"""Checkpoints: the driver coordinates, each role writes its own state.

    <run>/checkpoints/step_<N>/
        trainer_state.json      step, data position, KL coefficient, policy version
        actor/ reference/ critic/ reward_model/    what each role's `save(dir)` writes

The directory is written under a temporary name, every file and directory in it is fsynced,
then it is renamed and its parent fsynced, and `latest` is replaced last (the same way): a run
killed mid-save, or a machine that loses power, resumes from the previous checkpoint instead of
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


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(top: Path) -> None:
    """Flush every file, then every directory of `top` (bottom-up), to the disk: a rename is only
    as durable as the data it names."""
    for dirpath, _dirs, files in os.walk(top, topdown=False):
        for name in files:
            _fsync(Path(dirpath) / name)
        _fsync(Path(dirpath))


def save(
    run_dir: Path,
    step: int,
    roles: dict[str, WorkerGroup],
    trainer_state: dict[str, Any],
    keep: int = 0,
) -> Path:
    """Write checkpoint `step`; with `keep` > 0, then delete all but the newest `keep` ones."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, group in roles.items():
        group.call("save", tmp / name)
    (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=1))
    _fsync_tree(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    _fsync(root)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(final.name)
    _fsync(latest_tmp)
    os.replace(latest_tmp, root / "latest")
    _fsync(root)
    if keep > 0:
        for old_step, path in list(steps(run_dir).items())[:-keep]:
            if path != final:  # never the one `latest` names
                shutil.rmtree(path, ignore_errors=True)
                log.info("removed checkpoint step_%d (trainer.max_checkpoints_to_keep=%d)", old_step, keep)
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
