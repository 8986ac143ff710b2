"""Checkpoints: trainable weights, optimizer, schedule, data position; written atomically.

`<run>/checkpoints/step_<N>/` is written under a temporary name and renamed when
complete, and `latest` is replaced last, so a run killed mid-save resumes from the
previous checkpoint instead of a half-written one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    # named_parameters lists a tied weight once; clone so safetensors sees no shared storage
    return {n: p.detach().cpu().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def save(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    actor_state: dict[str, Any],
    trainer_state: dict[str, Any],
) -> Path:
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(trainable_state(model), str(tmp / "weights.safetensors"))
    torch.save(actor_state, tmp / "actor_state.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")
    return final


def latest(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    return path if (path / "trainer_state.json").is_file() else None


def load(path: Path, model: torch.nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore weights into `model`; return (actor_state, trainer_state)."""
    weights = load_file(str(path / "weights.safetensors"))
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
    unknown = [n for n in weights if n not in params]
    if missing or unknown:
        raise ValueError(
            f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {unknown[:3]}"
        )
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))
    actor_state = torch.load(path / "actor_state.pt", weights_only=False)
    trainer_state = json.loads((path / "trainer_state.json").read_text())
    return actor_state, trainer_state
