"""What a run's first process does between fork and exec, in two orders of the same steps.

- `direct`: the work dir is known when the child is forked (the probe's trial runs, and servers
  without a zygote). Namespaces, mounts, PID namespace, cgroup, rlimits, uid, seccomp, and the
  caller (subprocess) execs.
- `prepared`: the zygote forks a sandbox for a worker slot before any request for it exists and
  does everything that does not depend on the request: the namespaces, the minimal root (with the
  server's whole work root staged in it, nsetup.bind_work), the PID namespace's init and its
  /proc, the cgroup. Then it waits. The request brings argv, environment, work dir, limits and the
  run's stdin, stdout and stderr; what is left before exec is the run's own work dir
  (nsetup.take_work_dir: the rest of the work root is unmounted), rlimits, the uid drop and
  seccomp. So the request waits only for those and the program itself, while a sandbox's set-up
  and tear-down overlap with other runs. A prepared sandbox serves exactly one request.

The parent builds a `Steps` before forking, so that a child of the multi-threaded server only
makes system calls (the zygote is single-threaded: its sandboxes also unpickle their request). A
failure is written to stderr as `SETUP_FAILED: why` with exit status SETUP_EXIT; in a prepared
sandbox stderr is the channel to the zygote until the request arrives. Only init and the
program before its exec hold that channel; a program cannot reach it (init is not dumpable).
"""

from __future__ import annotations

import os
import pickle
import resource
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from turnrl.servers.sandbox import nsetup, pidns, subreaper

SETUP_FAILED = "turnrl-sandbox: setup failed"
SETUP_EXIT = 125
READY = b"ready"
INIT = b"init "  # + init's pid on the host, from the launcher
EXIT = b"exit "  # + the program's wait status, from init
MAX_REQUEST = 1 << 20  # argv and environment of one run, pickled


@dataclass
class RunRequest:
    """What a prepared sandbox learns when its request arrives (its stdio comes beside it)."""

    argv: list[str]
    env: dict[str, str]
    workdir: str  # the run's dir on the host, inside the server's work root (a session's root)
    rlimits: list[tuple[int, tuple[int, int]]]
    uid: int | None = None  # a session's own uid instead of the slot's (with the uid layer)
    session: bool = False  # workdir is a session root: its app, tests, logs at /app, /tests, /logs


@dataclass
class Steps:
    """A run's set-up, resolved in the parent (server or zygote) before it forks."""

    parent: int
    pdeathsig: bool
    cgroup_files: list[str]
    setup: Callable[[], None]  # namespaces and mounts (nsetup.namespace_setup)
    pid_ns: bool
    mount_ns: bool
    split: bool  # a run reaper (subreaper.py)
    uid: int | None
    install_filter: Callable[[], None] | None
    rlimits: list[tuple[int, tuple[int, int]]] = field(default_factory=list)
    rootfs: bool = False  # the minimal root is entered (a session's dirs go to /app, /tests, /logs)
    session: bool = False  # (direct only) the cwd is a session root, not a run's work dir

    def begin(self) -> list[int]:
        """Parent-death signal; the cgroup files, opened while /sys is in reach (the minimal root
        has none) and written by whoever joins."""
        if self.pdeathsig:
            nsetup.prctl(nsetup.PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self.parent:  # the parent died before prctl took effect
                os._exit(SETUP_EXIT)
        return [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in self.cgroup_files]

    def lock_down(self, rlimits: list[tuple[int, tuple[int, int]]], uid: int | None = None) -> None:
        """rlimits, the drop to the slot's uid (or `uid`, a session's, where the slot has one),
        no_new_privs, seccomp."""
        for res, pair in rlimits:
            resource.setrlimit(res, pair)
        target = self.uid if uid is None or self.uid is None else uid
        if target is not None:
            os.setgroups([])
            os.setgid(target)
            os.setuid(target)
            nsetup.prctl(nsetup.PR_SET_NO_NEW_PRIVS, 1)
        if self.install_filter is not None:  # last: everything above needs calls it denies
            self.install_filter()


def join(cgroups: list[int]) -> None:
    """Move the calling process into the cgroups (as root: a slot uid may not move itself)."""
    for fd in cgroups:
        os.write(fd, b"0")  # "0" = the writing process itself
        os.close(fd)


def fail(err: BaseException) -> NoReturn:
    try:
        os.write(2, f"{SETUP_FAILED}: {err}\n".encode(errors="replace"))
    finally:
        os._exit(SETUP_EXIT)


def direct(steps: Steps) -> Callable[[], None]:
    """preexec_fn for subprocess: returns in the program's process, which subprocess then execs;
    the processes split off (PID-namespace launcher and init, run reaper) never return."""

    def child() -> None:
        try:
            cgroups = steps.begin()
            steps.setup()
            if steps.session and steps.mount_ns:
                nsetup.enter_session_direct(steps.rootfs)
            if steps.pid_ns:
                pidns.enter(steps.pdeathsig, SETUP_EXIT)
            if steps.split:  # before the rlimits: the reaper, a copy of the server, must not hit them
                subreaper.split_off_program(steps.pdeathsig, SETUP_EXIT)
            join(cgroups)  # the program alone: launcher and init stay out of the kill sweep
            steps.lock_down(steps.rlimits)
        except BaseException as err:
            fail(err)

    return child


def prepared(steps: Steps, channel: int) -> Callable[[], NoReturn]:
    """The zygote's child, with stdin and stdout on /dev/null and stderr on `channel` (a
    SOCK_SEQPACKET socket to the zygote): set up, say READY, wait for the request, exec."""

    def child() -> NoReturn:
        try:
            cgroups = steps.begin()
            steps.setup()
            if steps.pid_ns:
                got: list[tuple[RunRequest, list[int]]] = []

                def before_program() -> None:  # init joins, so the program needs no slow join
                    join(cgroups)
                    got.append(_await(channel))
                    os.dup2(got[0][1][2], 2)  # init's note on a death by signal goes to the run

                hooks = pidns.Hooks(
                    announce=lambda init: _say(channel, INIT + str(init).encode()),
                    before_program=before_program,
                    report=lambda status: _say(channel, EXIT + str(status).encode()),
                    keep=[channel],
                )
                pidns.enter(steps.pdeathsig, SETUP_EXIT, hooks)
                request, stdio = got[0]
            else:
                if steps.split:
                    subreaper.split_off_program(steps.pdeathsig, SETUP_EXIT)
                join(cgroups)
                request, stdio = _await(channel)
            _take_stdio(stdio)
            if steps.mount_ns:
                nsetup.take_work_dir(request.workdir, request.session, steps.rootfs)
            else:
                os.chdir(os.path.join(request.workdir, "app") if request.session else request.workdir)
            steps.lock_down(request.rlimits, request.uid)
            _exec(request)
        except BaseException as err:
            fail(err)

    return child


def _say(channel: int, message: bytes) -> None:
    os.write(channel, message)


def _await(channel: int) -> tuple[RunRequest, list[int]]:
    """Say READY and block until the request and its three descriptors arrive."""
    _say(channel, READY)
    sock = socket.socket(fileno=channel)
    try:
        data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 3, socket.MSG_CMSG_CLOEXEC)
    finally:
        sock.detach()  # the descriptor stays: init reports through it
    if not data:  # the zygote let go of this sandbox (it is stopping)
        os._exit(SETUP_EXIT)
    if len(fds) != 3:
        raise OSError(f"request came with {len(fds)} descriptors, not 3")
    return pickle.loads(data), fds


def _take_stdio(fds: list[int]) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    # the channel, the received originals: nothing but stdio reaches the program
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))


def _exec(request: RunRequest) -> NoReturn:
    argv = request.argv
    try:
        if "/" in argv[0]:
            os.execve(argv[0], argv, request.env)
        os.execvpe(argv[0], argv, request.env)
    except OSError as err:
        raise OSError(err.errno, f"exec {argv[0]}: {err.strerror}") from err
    raise AssertionError("exec returned")
