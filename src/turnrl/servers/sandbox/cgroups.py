"""A cgroup per run, capping its total memory and process count.

rlimits are per process: a program that forks 60 children may hold 60 x its address-space
limit. A memory cgroup bounds the sum (its /tmp tmpfs included), and a pids cgroup bounds the
process count whatever the uid. Both hierarchies are supported: cgroup v1 (separate `memory`
and `pids` mounts) and v2 (unified, where the server's cgroup must be allowed to delegate
those controllers). Anything that fails here only means the layer is reported as off.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from turnrl.servers.sandbox import reaper

ROOT = Path("/sys/fs/cgroup")
PREFIX = "turnrl-sandbox-"


def _own_paths() -> dict[str, str]:
    """controller ("memory", "pids", or "" for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _v2_controllers() -> set[str]:
    path = ROOT / "cgroup.controllers"
    return set(path.read_text().split()) if path.exists() else set()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_tree(path: Path) -> None:
    """rmdir a cgroup and its children, bottom up (cgroup dirs only accept rmdir)."""
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir():
            _remove_tree(child)
    with contextlib.suppress(OSError):
        path.rmdir()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class CgroupSlots:
    """Cgroups under `<server's cgroup>/turnrl-sandbox-<pid>/cell-<i>`: two cells per worker slot,
    used by the slot's runs in turn (isolation.cell_of), so that a sandbox can be made ready in one
    while the slot's current run uses the other."""

    def __init__(self, cells: int) -> None:
        self.version = 0
        self.parents: list[Path] = []  # one per hierarchy we created a directory in
        self.cell_dirs: list[list[Path]] = [[] for _ in range(cells)]
        self.limits: dict[int, tuple[int, int]] = {}  # cell -> what set_limits last wrote
        own = _own_paths()
        if (ROOT / "memory" / "cgroup.procs").exists() and (ROOT / "pids" / "cgroup.procs").exists():
            self.version = 1
            bases = [ROOT / c / own.get(c, "/").lstrip("/") for c in ("memory", "pids")]
        elif {"memory", "pids"} <= _v2_controllers():
            self.version = 2
            base = ROOT / own.get("", "/").lstrip("/")
            with contextlib.suppress(OSError):
                _write(base / "cgroup.subtree_control", "+memory +pids")
            bases = [base]
        else:
            raise OSError("no writable cgroup hierarchy with memory and pids controllers")
        try:
            for base in bases:
                self._remove_stale(base)
                parent = base / f"{PREFIX}{os.getpid()}"
                parent.mkdir(exist_ok=True)
                self.parents.append(parent)
                if self.version == 2:
                    _write(parent / "cgroup.subtree_control", "+memory +pids")
                for i in range(cells):
                    d = parent / f"cell-{i}"
                    d.mkdir(exist_ok=True)
                    self.cell_dirs[i].append(d)
        except OSError:
            for parent in self.parents:
                _remove_tree(parent)
            raise

    @staticmethod
    def _remove_stale(base: Path) -> None:
        """Directories left by a sandbox server that died without cleaning up."""
        for d in base.glob(f"{PREFIX}*"):
            pid = d.name[len(PREFIX) :]
            if pid.isdigit() and not _pid_alive(int(pid)):
                _remove_tree(d)

    def procs_files(self, cell: int) -> list[str]:
        """Files a child writes "0" to (launch.join) to join the cell's cgroups."""
        return [str(d / "cgroup.procs") for d in self.cell_dirs[cell]]

    def set_limits(self, cell: int, memory_bytes: int, pids: int) -> None:
        if self.limits.get(cell) == (memory_bytes, pids):
            return  # most runs ask for the default: the files hold it already
        self.limits.pop(cell, None)  # unknown until every write below has gone through
        for d in self.cell_dirs[cell]:
            if self.version == 2:
                _write(d / "memory.max", str(memory_bytes))
                with contextlib.suppress(OSError):
                    _write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(pids))
            elif (d / "memory.limit_in_bytes").exists():
                # memsw must stay >= the plain limit, so order the writes by direction.
                memsw = d / "memory.memsw.limit_in_bytes"
                try:
                    _write(d / "memory.limit_in_bytes", str(memory_bytes))
                    if memsw.exists():
                        _write(memsw, str(memory_bytes))
                except OSError:
                    if memsw.exists():
                        _write(memsw, str(memory_bytes))
                    _write(d / "memory.limit_in_bytes", str(memory_bytes))
            elif (d / "pids.max").exists():
                _write(d / "pids.max", str(pids))
        self.limits[cell] = (memory_bytes, pids)

    def pids(self, cell: int) -> set[int]:
        out: set[int] = set()
        for d in self.cell_dirs[cell]:
            with contextlib.suppress(OSError):
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return out

    def kill(self, cell: int, spare: frozenset[int] = frozenset(), deadline_s: float = 2.0) -> int:
        """SIGKILL everything in the cell's cgroups but `spare` until none is left; returns the count."""
        return reaper.kill_until_gone(lambda: [p for p in self.pids(cell) if p not in spare], deadline_s)

    def close(self) -> None:
        for i in range(len(self.cell_dirs)):
            self.kill(i, deadline_s=1.0)
        for parent in self.parents:
            _remove_tree(parent)
