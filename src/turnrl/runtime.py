"""Process-level helpers every layer may use: they import nothing of turnrl's but its errors.

Kept free of heavy imports at module level (no torch): the sandbox server and the HTTP clients
import this module, and their start-up must not pay for torch.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import sys
import tempfile
from pathlib import Path

from turnrl.errors import TurnrlInputError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now. Another process can take it before the caller
    binds it, so whoever starts a server on it retries on "address already in use"."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def peak_rss_bytes() -> int:
    """This process's peak resident memory in bytes. Linux's `VmHWM` first: `ru_maxrss` survives
    exec, so a run started by a large parent (a pytest worker, a benchmark driver, a Ray raylet)
    would report the parent's peak, not its own."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    except OSError:
        pass  # no procfs (macOS): the rusage figure, which has no such carry-over there
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux and in bytes on macOS
    return peak if sys.platform == "darwin" else peak * 1024


def memory_metrics() -> dict[str, float]:
    """This process's peak memory so far, in GiB: `perf/max_rss_gb` (resident memory, what the
    machine runs out of on a CPU run; with Ray workers in other processes, the driver's alone) and,
    once CUDA is in use, `perf/max_memory_allocated_gb` (the peak of torch's allocator)."""
    out = {"perf/max_rss_gb": peak_rss_bytes() / 2**30}
    torch = sys.modules.get("torch")  # a process that never imported torch has no CUDA memory
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch; with `deterministic`, also make GPU kernels deterministic
    (`trainer.deterministic`): CPU kernels already are, for a fixed thread count. Every process
    that builds a role calls it (the driver, each Ray rank), hence its place at the bottom."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic; read when CUDA initialises
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def ensure_writable_dir(path: Path, what: str, error: type[Exception] = TurnrlInputError) -> Path:
    """`path`, checked to be a directory this process can create (parents included) and write files
    in; raises `error` with one line naming `what` (the flag or key that chose it), the path and the
    OS's reason, e.g. `--out /proc/x: cannot create (No such file or directory)`.

    The check does both for real and undoes them, so nothing is left behind: permission bits
    cannot tell (root passes `os.access` on /proc, which refuses every mkdir; a read-only mount
    shows only on write), the OS can. Commands call it before any model loads."""
    problem = write_problem(path)
    if problem:
        raise error(f"{what} {path}: {problem}")
    return path


def _nearest_existing(path: Path) -> tuple[Path, list[Path]]:
    """(`path` or its nearest existing ancestor: where mkdir would write first, the missing
    directories below it, deepest first)."""
    missing: list[Path] = []
    probe = path
    while not os.path.lexists(probe) and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    return probe, missing


def directory_problem(path: Path) -> str:
    """Why `path` cannot be a directory ('' if it is one or could be made): it or an ancestor is a
    file, `is a file, not a directory` / `notes is a file, not a directory`. It only looks and creates
    nothing (`write_problem` also tries)."""
    probe, _ = _nearest_existing(path)
    if probe.is_dir():
        return ""
    kind = "is a file, not a directory" if probe.is_file() else "is not a directory"
    return kind if probe == path else f"{probe} {kind}"


def write_problem(path: Path) -> str:
    """Why creating directory `path` and writing a file in it fails ('' if it works); see
    `ensure_writable_dir`."""
    problem = directory_problem(path)
    if problem:
        return problem
    _, missing = _nearest_existing(path)
    created: list[Path] = []
    step = "create"
    try:
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if directory.is_dir():
                    continue  # made meanwhile by another process: not ours to remove
                raise
            created.append(directory)
        step = "write into it"
        fd, probe_file = tempfile.mkstemp(dir=path, prefix=".turnrl-write-probe-")
        os.close(fd)
        os.unlink(probe_file)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        failed = err.filename if step == "create" else None
        where = f" {failed}" if failed is not None and Path(failed) != path else ""
        return f"cannot {step}{where} ({reason})"
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError):  # someone else wrote into it meanwhile: theirs now
                os.rmdir(directory)
    return ""
