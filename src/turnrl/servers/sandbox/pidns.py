"""The run's own PID namespace, made in the forked child itself, with no launcher program exec'd.

unshare(CLONE_NEWPID) moves only the caller's *next* child into the new namespace, so the child
forks twice:

    launcher   (outside)   waits for init and exits with its status: the process the server sees
      init     (pid 1)     mounts the namespace's own /proc, forks the program, reaps orphans,
                           and exits with the program's status; the kernel then kills the rest
        program (pid 2)    returns to the caller, which drops privileges, installs seccomp, execs

This replaces `unshare --pid --fork --kill-child --mount-proc -- sh -c '"$@"; exit $?'` followed
by `setpriv` and a python stage for the seccomp filter (unshare needs mount(2) and unshare(2)
after its exec, so the filter could only go on after it): three execs and one interpreter start
per run. Here the filter goes on in the program's own process, right before its exec.

The program is not pid 1 because pid 1 ignores every signal it has no handler for (even an
alarm it set itself). Init behaves like the shell it replaces: exit status 128 + N for death by
signal N, and a note on stderr as dash writes it ("Killed", "Alarm clock").

Launcher and init are copies of whatever forked the run (the zygote, or the server itself) that
never exec: they only make system calls, hold no descriptor but init's stderr (for that note) and,
in a sandbox prepared by the zygote, its channel to the zygote (`Hooks`: init waits there for the
request before it forks the program, and reports the program's status there before it exits, so
the run's end is heard before the namespaces are torn down). Init is not dumpable, so a program
cannot read its memory or environment through /proc/1.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from turnrl.servers.sandbox import nsetup
from turnrl.servers.sandbox.nsetup import MS_NODEV, MS_NOEXEC, MS_NOSUID

CLONE_NEWPID = 0x20000000
PR_SET_DUMPABLE = 4
QUIET_SIGNALS = (signal.SIGINT, signal.SIGPIPE)  # dash reports every other death by signal
FAILED = 128 + signal.SIGKILL  # a launcher or init that could not find out what happened
TITLE = b"sandbox-init"  # init's command line as programs see it in /proc/1/cmdline


def _nothing() -> None:
    pass


@dataclass
class Hooks:
    """What a sandbox prepared ahead of its request (the zygote's) adds to the sequence."""

    announce: Callable[[int], None] = lambda init: None  # in the launcher: init's pid on the host
    before_program: Callable[[], None] = _nothing  # in init, before the program is forked
    report: Callable[[int], None] = lambda status: None  # in init: the program's wait status
    keep: list[int] = field(default_factory=list)  # descriptors init keeps besides stderr


def enter(parent_death: bool, setup_exit: int, hooks: Hooks | None = None) -> None:
    """Run in the forked child, after its mount namespace is laid out. Returns in the program's
    process (pid 2 of a new PID namespace); the launcher and the init never return."""
    assert nsetup.LIBC is not None
    hooks = hooks or Hooks()
    nsetup._check(nsetup.LIBC.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    # init's way to tell that the launcher still exists: the launcher holds the write end
    alive_r, alive_w = os.pipe()
    init = nsetup.fork()
    if init:
        os.close(alive_r)
        hooks.announce(init)
        _launcher(init, alive_w)
    os.close(alive_w)
    if parent_death:  # the namespace dies with the launcher, as with `unshare --kill-child`
        nsetup.prctl(nsetup.PR_SET_PDEATHSIG, signal.SIGKILL)
        if _writer_gone(alive_r):  # the launcher died before prctl took effect
            os._exit(setup_exit)
    os.close(alive_r)
    # proc shows the PID namespace of the process that mounts it, so init mounts it
    nsetup._mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _retitle(TITLE)
    # before the fork: the program starts non-dumpable too, so there is no moment in which it
    # could read init's memory; its exec makes it dumpable again
    nsetup.prctl(PR_SET_DUMPABLE, 0)
    hooks.before_program()
    program = nsetup.fork()
    if program == 0:
        return
    _init(program, hooks)


def _retitle(title: bytes) -> None:
    """Overwrite the argv area this copy of the zygote (or of the server) inherited, in place as
    setproctitle(3) does, so that /proc/1/cmdline shows `title` and no command line of ours."""
    fd = os.open("/proc/self/stat", os.O_RDONLY)
    try:
        fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
    finally:
        os.close(fd)
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: stat fields 48 and 49
    if end > start:
        ctypes.memmove(start, title[: end - start - 1].ljust(end - start, b"\0"), end - start)


def _writer_gone(fd: int) -> bool:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1) == b""  # EOF: no write end is left
    except BlockingIOError:
        return False


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit status, or 128 + N for death by signal N."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def signal_note(status: int) -> str:
    """What dash writes to stderr when its foreground program dies of a signal (jobs.c,
    sprint_status with sigonly): strsignal, cut to 32 characters, and a core-dump remark."""
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) in QUIET_SIGNALS:
        return ""
    number = os.WTERMSIG(status)
    name = (signal.strsignal(number) or f"Unknown signal {number}")[:32]
    return name + (" (core dumped)" if os.WCOREDUMP(status) else "") + "\n"


def _launcher(init: int, keep: int) -> NoReturn:
    code = FAILED
    try:
        # nothing of the run's pipes: they must reach EOF when the program's side closes them
        os.closerange(0, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        _, status = os.waitpid(init, 0)
        code = exit_code(status)
    finally:
        os._exit(code)


def _init(program: int, hooks: Hooks) -> NoReturn:
    code = FAILED
    try:
        keep = sorted({2, *hooks.keep})
        for low, high in zip([-1, *keep], [*keep, os.sysconf("SC_OPEN_MAX")], strict=True):
            os.closerange(low + 1, high)  # stdin, stdout: only the program's processes may hold them
        while True:  # orphans of the namespace are re-parented here: reap them as they come
            pid, status = os.waitpid(-1, 0)
            if pid == program:
                break
        code = exit_code(status)
        note = signal_note(status)
        if note:
            os.write(2, note.encode())
        hooks.report(status)  # after the note: whoever hears it may end the run at once
    finally:
        os._exit(code)
