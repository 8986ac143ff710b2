"""Checkpoints: the driver coordinates, each role writes its own state.

    <run>/checkpoints/step_<N>/
        trainer_state.json      step, data position, KL coefficient, policy version
        actor/ reference/ teacher/ critic/ reward_model/    what each role's `save(dir)` writes
        manifest.json           every other file's size and SHA-256, written last

The directory is written under a temporary name, every file and directory in it is fsynced,
then it is renamed and its parent fsynced, and `latest` is replaced last (the same way): a run
killed mid-save, or a machine that loses power, resumes from the previous checkpoint instead of
a half-written one. At resume the manifest is checked; a checkpoint that fails it (a truncated
or corrupted file, a file gone) is skipped with a warning naming it, and the one before is used.

DAPO dynamic sampling keeps no leftovers between steps (groups beyond a full batch are
dropped), so the loader position in `trainer_state.json` is all the data state there is.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnrl.workers.group import WorkerGroup
from turnrl.workers.state import CheckpointError

if TYPE_CHECKING:
    from turnrl.tracking.logger import Tracker

log = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest.json"
REPLAYED = "metrics.replayed.jsonl"
STEP_NAME = re.compile(r"step_[0-9]+")


def layout_problem(run_dir: Path, metrics: bool = True) -> str:
    """Why an existing run directory cannot take what a run writes into it ('' if it can): a
    directory where it writes a file (`config.yaml`, `metrics.jsonl`, `checkpoints/latest`, ...) or
    a file where it makes a directory (`checkpoints`). Checked before anything loads, so nothing of
    the run there is moved or rewritten first, and not found at the first save after training."""
    files = [".config.yaml.tmp", "config.yaml", "checkpoints/latest"]
    if metrics:  # the jsonl sink; a resume moves rows of later steps to REPLAYED
        files += ["metrics.jsonl", "metrics.jsonl.tmp", REPLAYED]
    for rel in ("checkpoints", "val_samples"):
        if os.path.lexists(run_dir / rel) and not (run_dir / rel).is_dir():
            kind = "is a file, not a directory" if (run_dir / rel).is_file() else "is not a directory"
            return f"{run_dir / rel} {kind}"
    for rel in files:
        if os.path.lexists(run_dir / rel) and not (run_dir / rel).is_file():
            kind = "is a directory, not a file" if (run_dir / rel).is_dir() else "is not a regular file"
            return f"{run_dir / rel} {kind}"
    return ""


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
    """Write checkpoint `step`; with `keep` > 0, then delete all but the newest `keep` ones.

    A disk that is full or read-only fails with one line; the temporary directory is removed
    and the previous checkpoints and `latest` are untouched."""
    root = run_dir / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    previous = steps(run_dir)  # taken now: a failure after the rename below must not name this one
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, group in roles.items():
            group.call("save", tmp / name)
        (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=1))
        write_manifest(tmp)
        _fsync_tree(tmp)
        # saving a step again (the final save after the last validation): the old copy is moved
        # aside, not deleted, until the new one is in place
        old = root / f".old_step_{step}"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        _fsync(root)
        shutil.rmtree(old, ignore_errors=True)
        latest_tmp = root / ".latest.tmp"
        latest_tmp.write_text(final.name)
        _fsync(latest_tmp)
        os.replace(latest_tmp, root / "latest")
        _fsync(root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # a read-only disk refuses even a no-op unlink
            (root / ".latest.tmp").unlink(missing_ok=True)
        raise CheckpointError(_save_failure(final, e, previous)) from e
    if keep > 0:
        for old_step, path in list(steps(run_dir).items())[:-keep]:
            if path != final:  # never the one `latest` names
                shutil.rmtree(path, ignore_errors=True)
                log.info("removed checkpoint step_%d (trainer.max_checkpoints_to_keep=%d)", old_step, keep)
    return final


def _save_failure(final: Path, e: OSError, previous: dict[int, Path]) -> str:
    why = {errno.ENOSPC: "the disk is full", errno.EROFS: "the file system is read-only"}.get(
        e.errno or 0, e.strerror or str(e)
    )
    if e.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    kept = (
        f"the previous checkpoint {previous[max(previous)]} is intact"
        if previous
        else "no earlier checkpoint"
    )
    # a rename refused by its target (`latest` a directory) names the target, not the temporary file
    culprit = (
        e.filename2
        if e.filename2 and e.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY)
        else e.filename
    )
    return f"cannot write checkpoint {final}: {why} ({culprit or e}); {kept}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: Path) -> None:
    """`manifest.json`: size and SHA-256 of every file under `directory`, relative paths."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(directory)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (directory / MANIFEST).write_text(json.dumps({"files": entries}, indent=1))


def manifest_problem(directory: Path) -> str | None:
    """Why `directory` fails its manifest (None when every file has its size and hash, and the
    trainer state reads back). A checkpoint written before manifests existed passes on its trainer
    state alone."""
    if not (directory / TRAINER_STATE).is_file():
        return f"{TRAINER_STATE} is missing"
    path = directory / MANIFEST
    if path.is_file():
        try:
            entries = json.loads(path.read_text())["files"]
        except (ValueError, KeyError, TypeError):
            return f"{MANIFEST} is unreadable"
        for rel, want in entries.items():
            f = directory / rel
            if not f.is_file():
                return f"{rel} is missing"
            if f.stat().st_size != want["size"]:
                return f"{rel} has {f.stat().st_size} bytes, the manifest says {want['size']}"
            if _sha256(f) != want["sha256"]:
                return f"{rel} does not match its SHA-256 in the manifest"
    return trainer_state_problem(directory / TRAINER_STATE)


def trainer_state_problem(path: Path) -> str | None:
    """Why `trainer_state.json` cannot be resumed from (None: it is a JSON object with an integer
    `global_step`)."""
    try:
        state = json.loads(path.read_bytes())
    except ValueError:  # UnicodeDecodeError included
        return f"{TRAINER_STATE} is not JSON"
    except OSError as e:
        return f"{TRAINER_STATE} cannot be read ({e.strerror or e})"
    step = state.get("global_step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        return f"{TRAINER_STATE} has no integer global_step"
    return None


def latest(run_dir: Path) -> Path | None:
    """The checkpoint to resume from: the one the `latest` pointer names, if it passes its
    manifest; else the newest one that does, said out loud (a skipped checkpoint is named with
    the reason): never a silent start from scratch, never a load of a corrupt file."""
    root = run_dir / "checkpoints"
    pointer = root / "latest"
    found = steps(run_dir)
    name = _pointer_name(pointer)
    named = root / name if name is not None else None
    candidates = ([named] if named is not None and named.is_dir() else []) + [
        p for p in reversed(found.values()) if p != named
    ]
    for path in candidates:
        problem = manifest_problem(path)
        if problem is None:
            if path != named:
                log.warning(
                    "checkpoint pointer %s does not name a usable checkpoint; using %s", pointer, path
                )
            return path
        log.warning("skipping corrupt checkpoint %s: %s", path, problem)
    return None


def _pointer_name(pointer: Path) -> str | None:
    """The checkpoint `latest` names: a sibling `step_<N>` directory's name, nothing else (a path
    elsewhere, a name too long for the OS, bytes that are not text, no file: None)."""
    try:
        name = pointer.read_bytes().decode("utf-8").strip() if pointer.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return None
    return name if STEP_NAME.fullmatch(name) else None


def steps(run_dir: Path) -> dict[int, Path]:
    """Every complete checkpoint of a run, by step."""
    root = run_dir / "checkpoints"
    out: dict[int, Path] = {}
    for p in root.glob("step_*") if root.is_dir() else []:
        suffix = p.name.removeprefix("step_")
        if suffix.isdigit() and (p / TRAINER_STATE).is_file():
            out[int(suffix)] = p
    return dict(sorted(out.items()))


def restore(
    run_dir: Path, roles: dict[str, WorkerGroup], tracker: Tracker, enabled: bool = True
) -> dict[str, Any] | None:
    """Resume a run: load the newest sound checkpoint into `roles` and return its trainer state
    (None: start afresh). Either way `metrics.jsonl` is rewound to the step the run goes on from,
    so the steps about to be logged again are not there twice."""
    path = latest(run_dir) if enabled else None
    if path is None:  # rows a run that never checkpointed logged will be logged again
        if moved := tracker.rewind(-1):
            log.warning("no checkpoint to resume from: %d earlier metrics rows moved to %s", moved, REPLAYED)
        return None
    state = load(path, roles)
    moved = tracker.rewind(int(state["global_step"]))
    extra = f" ({moved} metrics rows of later steps moved to {REPLAYED})" if moved else ""
    log.warning("resumed from %s at step %d%s", path, state["global_step"], extra)
    return state


def load(path: Path, roles: dict[str, WorkerGroup]) -> dict[str, Any]:
    """Each role restores its own state from `path/<role>`; returns the trainer state."""
    for name, group in roles.items():
        if not (path / name).is_dir():
            raise CheckpointError(
                f"checkpoint {path} has no '{name}' state; was it written by another setup?"
            )
        group.call("load", path / name)
    return json.loads((path / TRAINER_STATE).read_text())
