"""The isolation layers a run executes under, and the functions that put a process under them.

A run's process is forked from a sandbox the zygote prepared for the worker slot ahead of the
request (zygote.py; `prepare`), or, for the probe's trial runs and where no zygote can run, by the
server itself (`preexec`). Either way launch.py does the same steps in the child: parent-death
signal; new network and mount namespaces and their mounts (nsetup.py; with the rootfs layer a
minimal read-only root entered with pivot_root, rootfs.py); with a PID namespace the split into

    launcher (outside the namespace) -> init (pid 1) -> program (pid 2)       see pidns.py

and, in the program's process, its cgroup (or init's), rlimits, the drop to the slot's uid with
no_new_privs, the seccomp filter (seccomp.py) last, and exec. Where neither a PID namespace, a
cgroup nor a uid of its own holds the run together, the child first splits off a per-run reaper
(subreaper.py) that catches daemons. probe.py decides which layers this host supports.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from turnrl.servers.sandbox import launch, nsetup, rootfs, seccomp
from turnrl.servers.sandbox.cgroups import CgroupSlots
from turnrl.servers.sandbox.launch import SETUP_EXIT, SETUP_FAILED
from turnrl.servers.sandbox.nsetup import WORK_PATH, Exposure
from turnrl.servers.sandbox.rootfs import RootPlan

__all__ = ["SETUP_EXIT", "SETUP_FAILED", "Isolation", "Limits", "cell_of", "cpu_seconds_for"]

FALLBACK_NOTE = "stronger layer sets failed"

LAYER_INFO = {
    "process_group": "own session/process group per run; all it started is killed when the program ends",
    "work_dir": "fresh temporary work dir per run, removed afterwards",
    "rlimits": "rlimits on CPU time, address space, file size, open files, processes; no core dumps",
    "scrubbed_env": "minimal environment (PATH, HOME=work dir, LANG): no server variables",
    "output_cap": "stdout/stderr read incrementally and capped",
    "parent_death": "runs are killed if the server dies (PR_SET_PDEATHSIG)",
    "unprivileged_uid": "each worker slot runs as its own unprivileged uid (fork bound, no access to server files)",
    "user_namespace": "unprivileged user namespace (non-root server)",
    "pid_namespace": "own PID namespace and /proc: sees no other process; everything dies with the run",
    "mount_namespace": "private /tmp, /var/tmp, /dev/shm; work dir at /tmp/sandbox",
    "rootfs": "minimal read-only root (pivot_root): interpreter, its libraries, /usr/bin, /usr/lib; no other host file",
    "network_namespace": "own network namespace with no interfaces up: no network at all",
    "seccomp": "seccomp filter: ptrace, mount, unshare/setns, bpf, kexec, modules, keyrings, io_uring ... fail with EPERM",
    "cgroup": "per-slot cgroup: total memory and process count of the run capped",
}


@dataclass
class Limits:
    """rlimits for one run, as (soft, hard) pairs."""

    address_space: int
    cpu_seconds: int
    file_size: int
    open_files: int
    processes: int

    def pairs(self) -> list[tuple[int, tuple[int, int]]]:
        cpu = (self.cpu_seconds, self.cpu_seconds + 1)  # SIGXCPU first, SIGKILL one second later
        wanted = [
            (resource.RLIMIT_AS, (self.address_space, self.address_space)),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_FSIZE, (self.file_size, self.file_size)),
            (resource.RLIMIT_NOFILE, (self.open_files, self.open_files)),
            (resource.RLIMIT_NPROC, (self.processes, self.processes)),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        out = []  # only ever lower a limit: raising a hard limit may be refused even to root
        for res, (soft, hard) in wanted:
            _, cur_hard = resource.getrlimit(res)
            cap = hard if cur_hard == resource.RLIM_INFINITY else min(hard, cur_hard)
            out.append((res, (min(soft, cap), cap)))
        return out


def cell_of(slot: int, half: int) -> int:
    """The cgroup cell of a worker slot's run: each slot has two, used in turn (see `prepare`)."""
    return 2 * slot + half


def cpu_seconds_for(run_timeout: float) -> int:
    # a little above the wall limit: the wall clock is the real limit, this catches runaway
    # CPU in processes that escape it
    return math.ceil(run_timeout) + 1


@dataclass
class Isolation:
    """Which layers are in force, with the tools they need. Built by probe.probe_isolation."""

    mode: str = "auto"
    uid_base: int | None = None
    user_ns: bool = False
    net_ns: bool = False
    pid_ns: bool = False
    mount_ns: bool = False
    cgroups: CgroupSlots | None = None
    pdeathsig: bool = False
    expose: list[Exposure] = field(default_factory=list)
    root: RootPlan | None = None  # the rootfs layer (needs mount_ns)
    seccomp: bytes | None = None  # the seccomp layer: the BPF program
    notes: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)  # stronger layer sets that failed here, and why
    uid_lock_fd: int | None = None

    @property
    def namespaces(self) -> bool:
        return self.user_ns or self.net_ns or self.pid_ns or self.mount_ns

    @property
    def run_reaper(self) -> bool:
        """Whether each run gets its own reaper process: only where no PID namespace, cgroup or
        slot uid already catches the processes that leave the run's session."""
        linux = sys.platform.startswith("linux") and nsetup.LIBC is not None
        return linux and not self.pid_ns and self.cgroups is None and self.uid_base is None

    def uid(self, slot: int) -> int | None:
        return None if self.uid_base is None else self.uid_base + slot

    def layers(self) -> dict[str, bool]:
        return {
            "process_group": True,
            "work_dir": True,
            "rlimits": True,
            "scrubbed_env": True,
            "output_cap": True,
            "parent_death": self.pdeathsig,
            "unprivileged_uid": self.uid_base is not None,
            "user_namespace": self.user_ns,
            "pid_namespace": self.pid_ns,
            "mount_namespace": self.mount_ns,
            "rootfs": self.root is not None,
            "network_namespace": self.net_ns,
            "seccomp": self.seccomp is not None,
            "cgroup": self.cgroups is not None,
        }

    def describe(self) -> list[str]:
        lines = [f"turnrl sandbox isolation (mode {self.mode}):"]
        for name, on in self.layers().items():
            lines.append(f"  [{'on ' if on else 'off'}] {name}: {LAYER_INFO[name]}")
        if not self.net_ns:
            lines.append("  WARNING: network is NOT isolated: programs can open connections")
        if self.fallbacks:
            lines.append(
                "  WARNING: fell back to weaker isolation; these stronger layer sets failed their trial run:"
            )
            lines.extend(f"    {f}" for f in self.fallbacks)
        lines.extend(f"  note: {n}" for n in self.notes if not n.startswith(FALLBACK_NOTE))
        return lines

    def work_path(self, host_dir: str) -> str:
        """The work dir as the program sees it."""
        return WORK_PATH if self.mount_ns else host_dir

    def env(self, work_path: str, path_dirs: list[str]) -> dict[str, str]:
        path = ":".join(dict.fromkeys([*path_dirs, "/usr/local/bin", "/usr/bin", "/bin"]))
        return {
            "PATH": path,
            "HOME": work_path,
            "TMPDIR": "/tmp" if self.mount_ns else work_path,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # output printed before a timeout kill still reaches us
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
            # numerical libraries would start one thread per host core and trip the process
            # and address-space limits on a large machine
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }

    def _steps(self, slot: int, cell: int, tmpfs_MB: int, work_root: str | None = None) -> launch.Steps:
        """Everything the forked child needs, resolved here in the parent."""
        enter_root = functools.partial(rootfs.enter, self.root) if self.root is not None else None
        setup = nsetup.namespace_setup(
            self.user_ns, self.net_ns, self.mount_ns, tmpfs_MB, self.expose, enter_root, work_root
        )
        return launch.Steps(
            parent=os.getpid(),
            pdeathsig=self.pdeathsig,
            cgroup_files=self.cgroups.procs_files(cell) if self.cgroups else [],
            setup=setup,
            pid_ns=self.pid_ns,
            mount_ns=self.mount_ns,
            split=self.run_reaper,
            uid=self.uid(slot),
            install_filter=seccomp.installer(self.seccomp) if self.seccomp else None,
            rootfs=self.root is not None,
        )

    def preexec(
        self, limits: Limits, slot: int, tmpfs_MB: int, uid: int | None = None, session: bool = False
    ) -> Callable[[], None]:
        """The function run in the forked child before exec (launch.direct), in the slot's first
        cgroup cell. It returns in the program's process; a failure is reported on stderr with
        exit code SETUP_EXIT. `uid`: a session's own uid instead of the slot's (with the uid
        layer); `session`: the cwd is a session root (launch.Steps)."""
        steps = self._steps(slot, cell_of(slot, 0), tmpfs_MB)
        steps.rlimits = limits.pairs()
        if uid is not None and steps.uid is not None:
            steps.uid = uid
        steps.session = session
        return launch.direct(steps)

    def prepare(
        self, slot: int, half: int, tmpfs_MB: int, work_root: str, channel: int
    ) -> Callable[[], NoReturn]:
        """The function a sandbox prepared ahead of its request runs (launch.prepared) in the
        zygote's child, in cgroup cell (slot, half): the cell that the slot's previous run did not
        use, so that the kill sweep after that run cannot touch it."""
        return launch.prepared(self._steps(slot, cell_of(slot, half), tmpfs_MB, work_root), channel)

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if self.uid_lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.uid_lock_fd)
            self.uid_lock_fd = None
