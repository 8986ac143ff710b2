"""What every role writes into the checkpoint directory it is given, and reads back.

    <dir>/weights.safetensors   the parameters the role trains (LoRA: the adapters only)
    <dir>/optim.pt              optimizer, schedule, skipped-step count
    <dir>/rng.pt                torch (CPU and CUDA), NumPy and Python RNG states
    <dir>/role.json             role name, model source, policy version

A role restores exactly what it saved and checks that the weights fit its model, so a
checkpoint of another model fails with one line naming the directory.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from turnrl.errors import TurnrlInputError
from turnrl.workers import parallel


class CheckpointError(TurnrlInputError):
    """A checkpoint that does not fit the run (other model, missing files); names the path."""


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    # named_parameters lists a tied weight once; clone so safetensors sees no shared storage
    return {n: p.detach().cpu().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def save_role(
    directory: Path,
    model: torch.nn.Module | None,
    info: dict[str, Any],
    optim_state: dict[str, Any] | None = None,
    everything: bool = False,
) -> None:
    """A role's checkpoint directory, written the same from 1 or N ranks: every rank joins in
    gathering the full (unsharded) state, rank 0 writes it; each rank writes its RNG streams."""
    weights = parallel.full_state_dict(model, trainable_only=not everything) if model is not None else None
    directory.mkdir(parents=True, exist_ok=True)
    if parallel.rank() == 0:
        if weights is not None:
            save_file(weights, str(directory / "weights.safetensors"))
        (directory / "role.json").write_text(json.dumps(info, indent=1))
        if optim_state is not None:
            torch.save(optim_state, directory / "optim.pt")
    torch.save(rng_state(), directory / rng_file(parallel.rank()))
    parallel.barrier()


def rng_file(rank: int) -> str:
    return "rng.pt" if rank == 0 else f"rng_rank{rank}.pt"


def load_weights(model: torch.nn.Module, path: Path, everything: bool = False) -> None:
    """Restore a `save_role` state into a plain or sharded model; names must match exactly."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint file missing: {path}")
    weights = load_file(str(path))
    expected = set(parallel.full_state_dict_names(model, trainable_only=not everything))
    if set(weights) != expected:
        raise CheckpointError(
            _mismatch(path, sorted(expected - set(weights)), sorted(set(weights) - expected))
        )
    parallel.load_full_state_dict(model, weights)


def _mismatch(path: Path, missing: list[str], unknown: list[str]) -> str:
    return f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {unknown[:3]}"


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def load_common(directory: Path, role: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(role.json, optim state or None); restores the RNG streams."""
    info_path = directory / "role.json"
    if not info_path.is_file():
        raise CheckpointError(f"checkpoint has no {role} state: {info_path} is missing")
    info = json.loads(info_path.read_text())
    if info.get("role") != role:
        raise CheckpointError(f"{info_path} belongs to role '{info.get('role')}', not '{role}'")
    # a rank that did not exist when the checkpoint was written takes rank 0's streams
    own = directory / rng_file(parallel.rank())
    set_rng_state(torch.load(own if own.is_file() else directory / "rng.pt", weights_only=False))
    optim = directory / "optim.pt"
    return info, (torch.load(optim, weights_only=False) if optim.is_file() else None)
