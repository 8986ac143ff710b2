"""A policy version on disk: the directory the trainer writes and an inference server loads.

    write_weights_dir(state_dict, "runs/x/rollout_weights/v3", config)   # trainer side, atomic
    load_weights_dir(model, "runs/x/rollout_weights/v3")                  # server side, strict

The format is a Hugging Face model directory (`model.safetensors`, `config.json`), so turnrl's
server, SGLang's `update_weights_from_disk` and `transformers` all read it. Tensors that share
storage (tied embeddings: `lm_head.weight` is `model.embed_tokens.weight`) are written once, as
`save_pretrained` does; the loader accepts a file that names any one member of a tied group.
It lives with the models because both the rollout engines (writers) and `turnrl serve` (reader)
use it, and engines sit below servers.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError


class WeightsError(TurnrlInputError):
    """A weights directory that cannot be loaded into the served model; the message names the
    first offending file or key. Nothing was changed in the model."""


def _dedupe(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous, one entry per storage (safetensors refuses shared tensors)."""
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        t = tensor.detach()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = t.to("cpu").contiguous()
    return out


def write_weights_dir(state: dict[str, torch.Tensor], path: str | Path, config: Any = None) -> Path:
    """Write `state` (+ `config.json` from a transformers config or a dict) as the directory `path`.

    Written into a temp directory next to it and renamed, so a reader never sees half a version;
    an existing `path` (the same version synced again, e.g. on resume) is replaced."""
    from safetensors.torch import save_file

    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        save_file(_dedupe(state), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if config is not None:
            data = config if isinstance(config, dict) else config.to_dict()
            (tmp / "config.json").write_text(json.dumps(data, indent=2, default=str))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _read_dir(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_dir():
        raise WeightsError(f"model_path {path}: not a directory")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"model_path {path}: no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            part = load_file(str(file), device="cpu")
        except (SafetensorError, OSError) as err:
            raise WeightsError(f"{file}: cannot read ({' '.join(str(err).split())})") from None
        for name in part:
            if name in tensors:
                raise WeightsError(f"{file}: tensor {name} is also in another file of {path}")
        tensors.update(part)
    return tensors


def load_weights_dir(model: torch.nn.Module, path: str | Path) -> int:
    """Copy the safetensors weights of directory `path` into `model`; returns the tensor count.

    Strict, and all-or-nothing: every key is checked (unknown key, missing key, shape, tied copies
    that differ) before the first copy, so on a WeightsError the model keeps its old weights."""
    path = Path(path)
    tensors = _read_dir(path)
    params = model.state_dict(keep_vars=True)
    groups: dict[tuple[int, int], list[str]] = {}  # tied parameters share one storage
    for name, p in params.items():
        groups.setdefault((p.untyped_storage().data_ptr(), p.storage_offset()), []).append(name)
    for name, t in tensors.items():
        if name not in params:
            raise WeightsError(f"{path}: unexpected key {name} (not a parameter of the served model)")
        if tuple(t.shape) != tuple(params[name].shape):
            raise WeightsError(
                f"{path}: {name} has shape {list(t.shape)}, the served model has {list(params[name].shape)}"
            )
    for names in groups.values():
        present = [n for n in names if n in tensors]
        if not present:
            raise WeightsError(f"{path}: missing key {names[0]}")
        for other in present[1:]:
            if not torch.equal(tensors[present[0]], tensors[other]):
                raise WeightsError(
                    f"{path}: {present[0]} and {other} are tied in the served model but differ in the file"
                )
    with torch.no_grad():
        for name, t in tensors.items():
            target = params[name]
            target.copy_(t.to(device=target.device, dtype=target.dtype))
    return len(tensors)
