"""Checkpoints under the state root, and the tinker:// paths that name them.

    tinker://<run>/weights/<name>          save_state: the adapter, its optimizer state, tinker.json
    tinker://<run>/sampler_weights/<name>  save_weights_for_sampler: the adapter and tinker.json

`<run>` is the training client's model id. A path resolves to `<state root>/<run>/<kind>/<name>`
and only there: anything else (another scheme, another number of parts, `..`, a name with a
slash, a symlink leading out of the root) is refused with one line naming the path, before any
file is opened.

A checkpoint directory is a plain peft adapter directory (`adapter_config.json`,
`adapter_model.safetensors`: `peft.PeftModel.from_pretrained(base, dir)` loads it), plus
`optimizer.pt` for a training state and `tinker.json` (base model, LoRA settings, creation time,
user metadata). It is written to a temporary directory beside its place and renamed there, so a
reader never sees half a checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from turnrl.servers.refusal import Refusal

SCHEME = "tinker://"
KINDS = {"weights": "training", "sampler_weights": "sampler"}
"""Path segment -> the SDK's checkpoint type."""
META = "tinker.json"
ADAPTER = "adapter_model.safetensors"
OPTIMIZER = "optimizer.pt"

_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class CheckpointRef:
    run: str
    kind: str
    name: str
    directory: Path

    @property
    def tinker_path(self) -> str:
        return f"{SCHEME}{self.run}/{self.kind}/{self.name}"


class StateRoot:
    """The directory every tinker:// path resolves inside; see the module docstring."""

    def __init__(self, path: str | Path) -> None:
        self.root = Path(path).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _inside(self, run: str, kind: str, name: str, shown: str, field: str) -> CheckpointRef:
        directory = self.root / run / kind / name
        # symlinks followed: a link planted under the root must not lead out of it
        if not directory.resolve().is_relative_to(self.root):
            raise Refusal(f"{field}: {shown!r} resolves outside this server's state root")
        return CheckpointRef(run, kind, name, directory)

    def parse(self, path: str, field: str, kinds: tuple[str, ...] = tuple(KINDS)) -> CheckpointRef:
        """The checkpoint `path` names, or a Refusal naming `field` and the path."""
        shape = " or ".join(f"{SCHEME}<run>/{k}/<name>" for k in kinds)
        refused = Refusal(f"{field}: {path!r} is not a checkpoint path of this server (expected {shape} inside the state root)")  # fmt: skip
        if not isinstance(path, str) or not path.startswith(SCHEME):
            raise refused
        parts = path[len(SCHEME) :].split("/")
        if len(parts) != 3 or parts[1] not in kinds:
            raise refused
        run, kind, name = parts
        if not _RUN.fullmatch(run) or not _NAME.fullmatch(name):
            raise refused
        return self._inside(run, kind, name, path, field)

    def new(self, run: str, kind: str, name: str, field: str) -> CheckpointRef:
        """Where a new checkpoint `name` of `run` goes, or a Refusal for a name that is no file name."""
        if not _NAME.fullmatch(name or ""):
            raise Refusal(
                f"{field}: {name!r} is not a checkpoint name (letters, digits, '.', '_', '-'; "
                f"starting with a letter or digit; at most 128)"
            )
        return self._inside(run, kind, name, f"{SCHEME}{run}/{kind}/{name}", field)

    def run_known(self, run: str) -> bool:
        return bool(_RUN.fullmatch(run)) and (self.root / run).is_dir()

    def list(self, run: str) -> list[dict[str, Any]]:
        """The run's checkpoints, oldest first, in the SDK's `Checkpoint` shape."""
        found = []
        for kind, checkpoint_type in KINDS.items():
            folder = self.root / run / kind
            if not folder.is_dir():
                continue
            for directory in folder.iterdir():
                meta = read_meta(directory)
                if meta is None:
                    continue  # a temporary directory being written, or something not ours
                ref = CheckpointRef(run, kind, directory.name, directory)
                size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
                found.append(
                    {
                        "checkpoint_id": f"{kind}/{directory.name}",
                        "checkpoint_type": checkpoint_type,
                        "time": meta.get("created", ""),
                        "tinker_path": ref.tinker_path,
                        "size_bytes": size,
                        "public": False,
                        "user_metadata": meta.get("user_metadata"),
                        "expires_at": None,
                    }
                )
        return sorted(found, key=lambda c: c["time"])


def read_meta(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / META).read_text())
    except (OSError, ValueError):
        return None


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def write_checkpoint(ref: CheckpointRef, overwrite: bool, fill: Any) -> None:
    """Make `ref`'s directory: `fill(tmp_dir)` writes the files into a temporary directory beside
    it, which is then renamed into place. An existing checkpoint is replaced only with `overwrite`."""
    if ref.directory.exists() and not overwrite:
        raise Refusal(f"path: checkpoint {ref.tinker_path} already exists (save with overwrite=True to replace it)")  # fmt: skip
    ref.directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.directory.parent / f".{ref.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        if ref.directory.exists():
            old = ref.directory.parent / f".{ref.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(ref.directory, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, ref.directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def checkpoint_meta(ref: CheckpointRef, field: str) -> dict[str, Any]:
    """The checkpoint's tinker.json, or a Refusal: there is no such checkpoint."""
    meta = read_meta(ref.directory)
    if meta is None:
        raise Refusal(f"{field}: no checkpoint at {ref.tinker_path}", 404)
    return meta
