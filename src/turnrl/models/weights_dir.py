"""A policy version on disk: the directory the trainer writes and an inference server loads.

    write_weights_dir(state_dict, "runs/x/rollout_weights/v3", config)   # trainer side, atomic
    load_weights_dir(model, "runs/x/rollout_weights/v3", root="runs/x/rollout_weights")  # server side

The format is a Hugging Face model directory (`model.safetensors`, `config.json`), so turnrl's
server, SGLang's `update_weights_from_disk` and `transformers` all read it. Tensors that share
storage (tied embeddings: `lm_head.weight` is `model.embed_tokens.weight`) are written once, as
`save_pretrained` does; the loader accepts a file that names any one member of a tied group.

The loader trusts nothing in the directory: with a `root`, the directory and every file must lie
inside it once symlinks are followed; only regular files are opened (a FIFO named
`model.safetensors` would block the reader forever); a tensor's dtype must be the parameter's (a
float of another width is cast: a trainer may hold fp32 master weights for a bf16 server, but ints
or bools are never taken for floats); and NaN or infinite values are refused.
It lives with the models because both the rollout engines (writers) and `turnrl serve` (reader)
use it, and engines sit below servers.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError


class WeightsError(TurnrlInputError):
    """A weights directory that cannot be loaded into the served model; the message names the
    first offending file or key. Nothing was changed in the model."""


class WeightsOutsideRoot(WeightsError):
    """A weights directory, or a file in it, that lies outside the directory loads may come from."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_in_root(path: str | Path, root: str | Path) -> Path:
    """`path` with every symlink followed (a relative one is taken under `root`), or
    WeightsOutsideRoot naming `path` if it is not inside `root`."""
    real_root = os.path.realpath(root)
    try:
        real = os.path.realpath(os.path.join(real_root, path))
    except (OSError, ValueError) as err:  # a NUL byte, a name too long
        raise WeightsError(f"model_path {str(path)[:200]!r}: not a usable path ({err})") from None
    if not _inside(real, real_root):
        raise WeightsOutsideRoot(
            f"model_path {str(path)[:200]!r}: outside the server's weights root (--weights-root), symlinks followed"
        )
    return Path(real)


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


def _read_dir(path: Path, root: str | None) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else None
    except OSError as err:  # no permission, a name too long, a symlink loop
        raise WeightsError(f"model_path {path}: cannot read ({err.strerror or err})") from None
    if files is None:
        raise WeightsError(f"model_path {path}: not a directory")
    if not files:
        raise WeightsError(f"model_path {path}: no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        if root is not None and not _inside(os.path.realpath(file), root):
            raise WeightsOutsideRoot(
                f"{file}: a link to a file outside the server's weights root (--weights-root)"
            )
        try:  # stat, not open: opening a FIFO or a device would block or read forever
            mode = os.stat(file).st_mode
        except OSError as err:
            raise WeightsError(f"{file}: cannot read ({err.strerror or err})") from None
        if not stat.S_ISREG(mode):
            raise WeightsError(f"{file}: not a regular file (a FIFO, a device or a directory); refused")
        try:
            part = load_file(str(file), device="cpu")
        except (SafetensorError, OSError) as err:
            raise WeightsError(f"{file}: cannot read ({' '.join(str(err).split())})") from None
        for name in part:
            if name in tensors:
                raise WeightsError(f"{file}: tensor {name} is also in another file of {path}")
        tensors.update(part)
    return tensors


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fitted(path: Path, name: str, t: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """`t` in the parameter's dtype, or WeightsError: ints or bools for floats (or the reverse)
    are refused, a float of another width is cast; NaN or infinity anywhere is refused."""
    if t.dtype != target.dtype:
        if not (t.is_floating_point() and target.is_floating_point()):
            raise WeightsError(
                f"{path}: {name} has dtype {_dtype(t.dtype)}, the served model has {_dtype(target.dtype)}"
            )
        t = t.to(target.dtype)  # e.g. fp32 master weights for a bf16 server
    # a float64 sum is finite iff every value is (no finite bf16/fp32 values add up to overflow it):
    # one pass, no boolean copy of the tensor
    if t.is_floating_point() and not torch.isfinite(t.sum(dtype=torch.float64)):
        raise WeightsError(f"{path}: {name} has NaN or infinite values (in {_dtype(t.dtype)})")
    return t


def load_weights_dir(model: torch.nn.Module, path: str | Path, root: str | Path | None = None) -> int:
    """Copy the safetensors weights of directory `path` into `model`; returns the tensor count.

    Strict, and all-or-nothing: every key is checked (unknown key, missing key, shape, dtype,
    non-finite values, tied copies that differ) before the first copy, so on a WeightsError the
    model keeps its old weights. `root`: the directory (and every file read) must lie inside it,
    symlinks followed (WeightsOutsideRoot); a relative `path` is taken under it."""
    real_root = None
    if root is not None:
        real_root = os.path.realpath(root)
        path = resolve_in_root(path, real_root)
    path = Path(path)
    tensors = _read_dir(path, real_root)
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
        tensors[name] = _fitted(path, name, t, params[name])
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
            target.copy_(t.to(device=target.device))
    return len(tensors)
