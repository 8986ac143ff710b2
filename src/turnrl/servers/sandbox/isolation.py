"""The isolation layers a run executes under, and how a run's process is spawned.

A run's command line is built from the layers in force (see probe.py for how they are chosen):

    unshare [--user --map-root-user] [--net] [--pid --fork --kill-child --mount-proc] --
        sh -c MOUNT_SCRIPT ...        # private /tmp, /var/tmp, /dev/shm; work dir at /tmp/sandbox
        setpriv --reuid=U ...         # the slot's own unprivileged uid
        python main.py

and `preexec()` runs in the forked child before `exec`: parent-death signal, joining the
slot's cgroups, rlimits, and (when there are no namespaces) the uid drop.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import resource
import shlex
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from turnrl.servers.sandbox.cgroups import CgroupSlots

WORK_PATH = "/tmp/sandbox"  # where the work dir appears inside the mount namespace
SETUP_FAILED = "turnrl-sandbox: setup failed"
SETUP_EXIT = 125


def mount_script(expose: list[tuple[str, str]]) -> str:
    """Shell run as root inside the new mount namespace, before the uid drop.

    The work dir is bound from /proc/self/cwd because its host path is hidden once a tmpfs
    covers /tmp. `expose` lists (path, blocked ancestor) pairs: an interpreter installed
    under a directory other users cannot enter (e.g. /root/.pyenv) is bound read-only onto an
    empty tmpfs covering that ancestor, so the unprivileged uid can run it and sees nothing
    else there.
    """
    q = shlex.quote
    lines = [
        f'fail() {{ echo "{SETUP_FAILED}: $1" >&2; exit {SETUP_EXIT}; }}',
        "size=$1; shift",
        "for d in /tmp /var/tmp /dev/shm; do",
        '  if [ -d "$d" ]; then mount -t tmpfs -o "size=$size,mode=1777,nosuid,nodev" tmpfs "$d" || fail "tmpfs $d"; fi',
        "done",
    ]
    for i, (path, _) in enumerate(expose):
        lines.append(
            f"mkdir /tmp/.expose{i} && mount --bind {q(path)} /tmp/.expose{i} || fail {q('stage ' + path)}"
        )
    for blocked in dict.fromkeys(b for _, b in expose):
        lines.append(f"mount -t tmpfs -o size=1m,mode=755 tmpfs {q(blocked)} || fail {q('cover ' + blocked)}")
    for i, (path, _) in enumerate(expose):
        lines.append(
            f"mkdir -p {q(path)} && mount --move /tmp/.expose{i} {q(path)} && rmdir /tmp/.expose{i} "
            f"&& mount -o remount,bind,ro {q(path)} || fail {q('expose ' + path)}"
        )
    lines += [
        f"mkdir {WORK_PATH} || fail 'mkdir {WORK_PATH}'",
        f"mount -c --bind /proc/self/cwd {WORK_PATH} || fail 'bind work dir'",
        f"cd {WORK_PATH} || fail cd",
        'exec "$@"',
    ]
    return "\n".join(lines) + "\n"


def _blocked_ancestor(path: str) -> str | None:
    """The first directory on `path` that users other than its owner cannot enter, if any."""
    current = "/"
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None


def hidden_paths(paths: list[str]) -> list[tuple[str, str]]:
    """(path, blocked ancestor) for each path an unprivileged uid could not reach, outermost only."""
    out: list[tuple[str, str]] = []
    for path in sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)}):
        if any(path == p or path.startswith(p + "/") for p, _ in out):
            continue
        blocked = _blocked_ancestor(path)
        if blocked is not None and blocked != path:
            out.append((path, blocked))
    return out


LAYER_INFO = {
    "process_group": "own session/process group per run, killed as a whole at the end",
    "work_dir": "fresh temporary work dir per run, removed afterwards",
    "rlimits": "rlimits on CPU time, address space, file size, open files, processes; no core dumps",
    "scrubbed_env": "minimal environment (PATH, HOME=work dir, LANG): no server variables",
    "output_cap": "stdout/stderr read incrementally and capped",
    "parent_death": "runs are killed if the server dies (PR_SET_PDEATHSIG)",
    "unprivileged_uid": "each worker slot runs as its own unprivileged uid (fork bound, no access to server files)",
    "user_namespace": "unprivileged user namespace (non-root server)",
    "pid_namespace": "own PID namespace: sees no other process; everything dies with the run",
    "mount_namespace": "private /tmp, /var/tmp, /dev/shm and /proc; work dir at /tmp/sandbox",
    "network_namespace": "own network namespace with no interfaces up: no network at all",
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


def cpu_seconds_for(run_timeout: float) -> int:
    # a little above the wall limit: the wall clock is the real limit, this catches runaway
    # CPU in processes that escape it
    return math.ceil(run_timeout) + 1


def _load_prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


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
    unshare: str | None = None
    setpriv: str | None = None
    sh: str | None = None
    expose: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    uid_lock_fd: int | None = None

    @property
    def namespaces(self) -> bool:
        return self.user_ns or self.net_ns or self.pid_ns or self.mount_ns

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
            "network_namespace": self.net_ns,
            "cgroup": self.cgroups is not None,
        }

    def describe(self) -> list[str]:
        lines = [f"turnrl sandbox isolation (mode {self.mode}):"]
        for name, on in self.layers().items():
            lines.append(f"  [{'on ' if on else 'off'}] {name}: {LAYER_INFO[name]}")
        if not self.net_ns:
            lines.append("  WARNING: network is NOT isolated: programs can open connections")
        lines.extend(f"  note: {n}" for n in self.notes)
        return lines

    def work_path(self, host_dir: str) -> str:
        """The work dir as the program sees it."""
        return WORK_PATH if self.mount_ns else host_dir

    def argv(self, program: list[str], slot: int, tmpfs_MB: int) -> list[str]:
        if not self.namespaces:
            return program
        assert self.unshare is not None
        cmd = [self.unshare]
        if self.user_ns:
            cmd += ["--user", "--map-root-user"]
        if self.net_ns:
            cmd.append("--net")
        if self.pid_ns:
            cmd += ["--pid", "--fork", "--kill-child", "--mount-proc"]
        elif self.mount_ns:
            cmd.append("--mount")
        cmd.append("--")
        uid = self.uid(slot)
        if uid is not None:
            assert self.setpriv is not None
            cmd += [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--no-new-privs",
                "--",
            ]
        cmd += program
        if self.mount_ns:
            assert self.sh is not None
            cut = cmd.index("--") + 1
            cmd[cut:cut] = [self.sh, "-c", mount_script(self.expose), "turnrl-sandbox", f"{tmpfs_MB}m"]
        return cmd

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
        }

    def preexec(self, limits: Limits, slot: int) -> Callable[[], None]:
        """The function run in the child between fork and exec. It only makes system calls:
        no locks, no allocation-heavy work, since the server is multi-threaded."""
        parent = os.getpid()
        pairs = limits.pairs()
        cgroup_files = self.cgroups.procs_files(slot) if self.cgroups else []
        # with namespaces, unshare must start as root; setpriv drops the uid inside
        drop_uid = self.uid(slot) if not self.namespaces else None
        prctl = _PRCTL if self.pdeathsig else None

        def child() -> None:
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != parent:  # the server died between fork and prctl
                    os._exit(SETUP_EXIT)
            for path in cgroup_files:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")  # "0" = the writing process itself
                finally:
                    os.close(fd)
            for res, pair in pairs:
                resource.setrlimit(res, pair)
            if drop_uid is not None:
                os.setgroups([])
                os.setgid(drop_uid)
                os.setuid(drop_uid)

        return child

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if self.uid_lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.uid_lock_fd)
            self.uid_lock_fd = None
