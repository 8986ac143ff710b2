"""What every role writes into the checkpoint directory it is given, and reads back.

    <dir>/weights.safetensors   the parameters the role trains (LoRA: the adapters only), one rank
    <dir>/shards/               the same and the optimizer moments, sharded, from N ranks
    <dir>/optim.pt              optimizer (one rank), schedule, skipped-step count
    <dir>/rng.pt                torch (CPU and CUDA), NumPy and Python RNG states
    <dir>/role.json             role name, model source, policy version

A role restores exactly what it saved and checks that the weights fit its model, so a
checkpoint of another model fails with one line naming the directory.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from turnrl.errors import TurnrlInputError
from turnrl.workers import parallel

if TYPE_CHECKING:
    from turnrl.workers.optim import Optimizer


WEIGHTS = "weights.safetensors"
SHARDS = "shards"


class CheckpointError(TurnrlInputError):
    """A checkpoint that does not fit the run (other model, missing files); names the path."""


def save_role(
    directory: Path,
    info: dict[str, Any],
    model: torch.nn.Module | None = None,
    optimizer: Optimizer | None = None,
    everything: bool = False,
) -> None:
    """A role's checkpoint directory; every rank calls it.

    One rank: `weights.safetensors` (the trained parameters, or `everything`) and `optim.pt`.
    N ranks: `shards/`, each rank writing its own shard of the weights and optimizer moments
    (torch.distributed.checkpoint, re-sharded on load for any number of ranks), rank 0 the
    schedule in `optim.pt`. Each rank writes its RNG streams.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if model is not None and parallel.world_size() > 1:
        parallel.save_shards(directory / SHARDS, model, optimizer.opt if optimizer else None, not everything)
        optim_state = optimizer.schedule_state() if optimizer else None
    else:
        if model is not None and parallel.rank() == 0:
            save_file(parallel.full_state_dict(model, not everything), str(directory / WEIGHTS))
        optim_state = optimizer.state_dict() if optimizer else None
    if parallel.rank() == 0:
        (directory / "role.json").write_text(json.dumps(info, indent=1))
        if optim_state is not None:
            torch.save(optim_state, directory / "optim.pt")
    torch.save(rng_state(), directory / rng_file(parallel.rank()))
    parallel.barrier()


def load_role(
    directory: Path,
    role: str,
    model: torch.nn.Module | None = None,
    optimizer: Optimizer | None = None,
    everything: bool = False,
) -> dict[str, Any]:
    """Restore what `save_role` wrote, whatever the number of ranks that wrote it; returns role.json."""
    info = load_common(directory, role)
    optim_path = directory / "optim.pt"
    optim_state = torch.load(optim_path, weights_only=False) if optim_path.is_file() else None
    if model is not None:
        load_weights(
            model,
            directory,
            everything,
            optimizer.opt if optimizer and optim_state and optim_state["stepped"] else None,
        )
    if optimizer is not None and optim_state is not None:
        if "optimizer" in optim_state:  # written by one rank: moments inside
            optimizer.load_state_dict(optim_state)
        else:
            optimizer.load_schedule_state(optim_state)
    return info


def rng_file(rank: int) -> str:
    return "rng.pt" if rank == 0 else f"rng_rank{rank}.pt"


def load_weights(
    model: torch.nn.Module, directory: Path, everything: bool = False, optimizer: Any = None
) -> None:
    """Weights (and, from shards, optimizer moments) of a role directory into a plain or sharded
    model; the names must match exactly. Also what `turnrl export` reads, in one process."""
    names = parallel.full_state_dict_names(model, trainable_only=not everything)
    if (directory / SHARDS).is_dir():
        parallel.load_shards(directory / SHARDS, model, optimizer, names)
        return
    path = directory / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"checkpoint file missing: {path}")
    weights = load_file(str(path))
    if set(weights) != set(names):
        raise CheckpointError(
            _mismatch(path, sorted(set(names) - set(weights)), sorted(set(weights) - set(names)))
        )
    shapes = parallel.full_state_dict_shapes(model, trainable_only=not everything)
    for name in names:  # the same names, another size of model: found here, not mid-copy
        if tuple(weights[name].shape) != shapes[name]:
            raise CheckpointError(_shape_mismatch(path, name, tuple(weights[name].shape), shapes[name]))
    parallel.load_full_state_dict(model, weights)


def _mismatch(path: Path, missing: list[str], unknown: list[str]) -> str:
    return f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {unknown[:3]}"


def _shape_mismatch(path: Path, name: str, saved: tuple[int, ...], wanted: tuple[int, ...]) -> str:
    return (
        f"checkpoint {path} does not match the model: {name} has shape {list(saved)} in the checkpoint, "
        f"{list(wanted)} in the model"
    )


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


def load_common(directory: Path, role: str) -> dict[str, Any]:
    """role.json; restores the RNG streams."""
    info_path = directory / "role.json"
    if not info_path.is_file():
        raise CheckpointError(f"checkpoint has no {role} state: {info_path} is missing")
    info = json.loads(info_path.read_text())
    if info.get("role") != role:
        raise CheckpointError(f"{info_path} belongs to role '{info.get('role')}', not '{role}'")
    # a rank that did not exist when the checkpoint was written takes rank 0's streams
    own = directory / rng_file(parallel.rank())
    set_rng_state(torch.load(own if own.is_file() else directory / "rng.pt", weights_only=False))
    return info
