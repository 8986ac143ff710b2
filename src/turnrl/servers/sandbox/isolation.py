"""The isolation layers a run executes under, and how a run's process is spawned.

With every layer on, the server forks and the child (see `preexec`) sets the parent-death
signal, joins the slot's cgroups, enters new network and mount namespaces and lays out its
mounts (nsetup.py), sets rlimits, and then execs

    unshare --pid --fork --kill-child --mount-proc --     # own PID namespace and /proc
        sh -c INIT_SCRIPT sandbox-init                        # the namespace's init (pid 1)
        setpriv --reuid=U --regid=U --clear-groups --no-new-privs --   # the slot's own uid
        python -I -S -c STAGE FILTER                          # the seccomp filter (seccomp.py)
        python main.py

With the rootfs layer the mount set-up builds a minimal read-only root and pivots into it
(rootfs.py), so the launchers above already run inside it.

Without a PID namespace there is no launcher: the child drops to the slot's uid, installs the
seccomp filter and execs the program directly; where neither a cgroup nor a uid of its own then
holds the run together, the child first splits off a per-run reaper (subreaper.py) that catches
daemons. probe.py decides which layers this host supports.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import resource
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from turnrl.servers.sandbox import nsetup, rootfs, seccomp, subreaper
from turnrl.servers.sandbox.cgroups import CgroupSlots
from turnrl.servers.sandbox.nsetup import WORK_PATH, Exposure
from turnrl.servers.sandbox.rootfs import RootPlan

SETUP_FAILED = "turnrl-sandbox: setup failed"
SETUP_EXIT = 125
# pid 1 of a namespace ignores every signal it has no handler for (even its own SIGKILL or an
# alarm), so the program must not be pid 1: a shell runs it in the foreground and passes its
# status on (128 + N for signal N; the shell also notes "Killed" etc. on stderr, as a terminal
# would). The trailing `exit` stops the shell from exec'ing the program in its own place.
INIT_SCRIPT = '"$@"; exit $?'


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
    unshare: str | None = None
    setpriv: str | None = None
    sh: str | None = None
    expose: list[Exposure] = field(default_factory=list)
    root: RootPlan | None = None  # the rootfs layer (needs mount_ns)
    seccomp: bytes | None = None  # the seccomp layer: the BPF program
    stage_python: str | None = None  # installs the filter after a PID-namespace launcher
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

    def argv(self, program: list[str], slot: int) -> list[str]:
        if not self.pid_ns:
            return program  # the seccomp filter, if any, is installed in preexec
        assert self.unshare is not None
        assert self.sh is not None
        cmd = [self.unshare, "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        cmd += [self.sh, "-c", INIT_SCRIPT, "sandbox-init"]
        uid = self.uid(slot)
        if uid is not None:  # unshare needs root to create the namespace, so the drop comes after it
            assert self.setpriv is not None
            cmd += [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--no-new-privs",
                "--",
            ]
        if self.seccomp is not None:  # last: unshare still needs unshare(2) and mount(2) after exec
            assert self.stage_python is not None
            cmd += seccomp.stage_argv(self.stage_python, self.seccomp, SETUP_FAILED, SETUP_EXIT)
        return cmd + program

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

    def preexec(self, limits: Limits, slot: int, tmpfs_MB: int) -> Callable[[], None]:
        """The function run in the forked child before exec. The server is multi-threaded, so
        it sticks to system calls; a failure is reported on stderr with exit code SETUP_EXIT."""
        parent = os.getpid()
        pairs = limits.pairs()
        cgroup_files = self.cgroups.procs_files(slot) if self.cgroups else []
        enter_root = functools.partial(rootfs.enter, self.root) if self.root is not None else None
        setup = nsetup.namespace_setup(
            self.user_ns, self.net_ns, self.mount_ns, tmpfs_MB, self.expose, enter_root
        )
        install_filter = seccomp.installer(self.seccomp) if self.seccomp and not self.pid_ns else None
        drop_uid = self.uid(slot) if not self.pid_ns else None  # else setpriv drops it after unshare
        pdeathsig = self.pdeathsig
        split = self.run_reaper

        def child() -> None:
            try:
                if pdeathsig:
                    nsetup.prctl(nsetup.PR_SET_PDEATHSIG, signal.SIGKILL)
                    if os.getppid() != parent:  # the server died before prctl took effect
                        os._exit(SETUP_EXIT)
                for path in cgroup_files:  # before any user namespace: joining needs host root
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.write(fd, b"0")  # "0" = the writing process itself
                    finally:
                        os.close(fd)
                setup()
                if split:  # before the rlimits: the reaper, a copy of the server, must not hit them
                    subreaper.split_off_program(pdeathsig, SETUP_EXIT)
                for res, pair in pairs:
                    resource.setrlimit(res, pair)
                if drop_uid is not None:
                    os.setgroups([])
                    os.setgid(drop_uid)
                    os.setuid(drop_uid)
                    nsetup.prctl(nsetup.PR_SET_NO_NEW_PRIVS, 1)
                if install_filter is not None:  # last: everything above needs calls it denies
                    install_filter()
            except BaseException as err:
                os.write(2, f"{SETUP_FAILED}: {err}\n".encode(errors="replace"))
                os._exit(SETUP_EXIT)

        return child

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if self.uid_lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.uid_lock_fd)
            self.uid_lock_fd = None
