"""A policy version on disk: the directory the trainer writes and an inference server loads.

    write_weights_dir(state_dict, "runs/x/rollout_weights/v3", config)   # trainer side, atomic
    load_weights_dir(model, "runs/x/rollout_weights/v3", root="runs/x/rollout_weights")  # server side

The format is a Hugging Face model directory (`model.safetensors`, `config.json`), so turnrl's
server, SGLang's `update_weights_from_disk` and `transformers` all read it. Tensors that share
storage (tied embeddings: `lm_head.weight` is `model.embed_tokens.weight`) are written once, as
`save_pretrained` does; the loader accepts a file that names any one member of a tied group.

The loader trusts nothing in the directory: with a `root`, the directory and every file must lie
inside it once symlinks are followed, and each is opened once, by descriptor, component by
component from the root's descriptor with `O_NOFOLLOW` (a link swapped in after the check is
refused, not followed); only regular files are read, checked by `fstat` on the open descriptor
(a FIFO named `model.safetensors` is opened non-blocking and refused, never read); a tensor's dtype must be the parameter's (a
float of another width is cast: a trainer may hold fp32 master weights for a bf16 server, but ints
or bools are never taken for floats); and NaN or infinite values are refused.
It lives with the models because both the rollout engines (writers) and `turnrl serve` (reader)
use it, and engines sit below servers.
"""

from __future__ import annotations

import errno
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


def _open_beneath(root: str, real: str, *, directory: bool) -> int:
    """A descriptor of `real` (a path inside `root` with no symlink in it, as `realpath` gives),
    opened one component at a time from the root's descriptor, never following a link: a component
    swapped for a link after the path was checked makes the open fail (ELOOP, ENOTDIR) instead of
    leading outside the root. A last component that is not a directory is opened non-blocking, so a
    FIFO swapped in does not hang the reader (`fstat` then refuses it)."""
    rel = os.path.relpath(real, root)
    parts = [] if rel == os.curdir else rel.split(os.sep)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            kind = os.O_DIRECTORY if directory or not last else os.O_NONBLOCK
            fd_next = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | kind, dir_fd=fd)
            os.close(fd)
            fd = fd_next
    except BaseException:
        os.close(fd)
        raise
    return fd


def _changed(where: Path, err: OSError) -> WeightsError:
    if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):  # a link where the check saw none
        return WeightsOutsideRoot(f"{where}: became a link while it was loaded (refused: it could lead outside --weights-root)")  # fmt: skip
    return WeightsError(f"{where}: cannot read ({err.strerror or err})")


def _open_file(dir_fd: int, path: Path, name: str, root: str | None) -> int:
    """A descriptor of the regular file `name` in the open directory `dir_fd` (`path`): a link is
    followed only to a file inside `root`, itself opened beneath the root without links."""
    file = path / name
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if root is not None else 0)
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as err:
        if root is None or err.errno != errno.ELOOP:
            raise _changed(file, err) from None
        real = os.path.realpath(file)  # a link: allowed if it stays inside the root
        if not _inside(real, root):
            raise WeightsOutsideRoot(
                f"{file}: a link to a file outside the server's weights root (--weights-root)"
            ) from None
        try:
            fd = _open_beneath(root, real, directory=False)
        except OSError as err2:
            raise _changed(file, err2) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # checked on what was opened, not on the name
        os.close(fd)
        raise WeightsError(f"{file}: not a regular file (a FIFO, a device or a directory); refused")
    return fd


def _load_fd(fd: int, file: Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file open as `fd`. Through /proc/self/fd (the open file
    itself, not a path looked up again: safetensors maps it, no copy) where there is one, else read."""
    from safetensors import SafetensorError
    from safetensors.torch import load, load_file

    try:
        proc = f"/proc/self/fd/{fd}"
        if os.path.exists(proc):
            return load_file(proc, device="cpu")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return load(fh.read())
    except (SafetensorError, OSError) as err:
        raise WeightsError(f"{file}: cannot read ({' '.join(str(err).split())})") from None


def _read_dir(path: Path, root: str | None) -> dict[str, torch.Tensor]:
    """Every `*.safetensors` of directory `path`, each opened once, by descriptor: with a `root`,
    the directory is opened beneath it without following links (`path` is the checked real path)
    and every file by name from the directory's descriptor, so nothing swapped in between the check
    and the read can lead outside the root or block the reader."""
    try:
        if root is not None:
            dir_fd = _open_beneath(root, str(path), directory=True)
        else:
            dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        plain = root is None or (not path.is_symlink() and os.path.realpath(path) == str(path))
        if err.errno == errno.ENOENT:
            raise WeightsError(f"model_path {path}: not a directory (nothing there)") from None
        if err.errno == errno.ENOTDIR and plain:  # a file where a directory is named, no link
            raise WeightsError(f"model_path {path}: not a directory") from None
        raise _changed(path, err) from None
    try:
        try:
            names = sorted(n for n in os.listdir(dir_fd) if n.endswith(".safetensors"))
        except OSError as err:  # no permission
            raise WeightsError(f"model_path {path}: cannot read ({err.strerror or err})") from None
        if not names:
            raise WeightsError(f"model_path {path}: no *.safetensors files")
        tensors: dict[str, torch.Tensor] = {}
        for name in names:
            fd = _open_file(dir_fd, path, name, root)
            try:
                part = _load_fd(fd, path / name)
            finally:
                os.close(fd)
            for key in part:
                if key in tensors:
                    raise WeightsError(f"{path / name}: tensor {key} is also in another file of {path}")
            tensors.update(part)
        return tensors
    finally:
        os.close(dir_fd)


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
