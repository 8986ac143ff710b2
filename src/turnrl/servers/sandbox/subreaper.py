"""A per-run reaper for isolation modes where nothing else can find a run's daemons.

Without a PID namespace, a cgroup or a uid of its own, the only thing tying a run's processes
together is their session, and a daemon leaves it with `setsid` (the classic double fork). So in
those modes the forked child forks once more before exec: the new child execs the program, and
the first one stays behind as a child subreaper (PR_SET_CHILD_SUBREAPER). Every process of the
run that loses its parent is then re-parented to this reaper instead of the host's init, whatever
its session. Once the program exits, the reaper SIGKILLs whatever it holds, waits for all of it,
and exits with the program's status (128 + N for death by signal N, like the PID namespace's
init), so the server sees the run end when the program ends, with nothing left running.

The reaper never execs: it is a forked copy of the server or of the zygote and sticks to system
calls. It holds no file descriptor, so the run's pipes close as soon as the program's side is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import NoReturn

from turnrl.servers.sandbox import nsetup, reaper

PR_SET_CHILD_SUBREAPER = 36


def split_off_program(parent_death: bool, setup_exit: int) -> None:
    """Run in the forked child before exec. Returns in the program's process; in the other
    process it becomes the run's reaper and never returns."""
    assert nsetup.LIBC is not None
    nsetup.prctl(PR_SET_CHILD_SUBREAPER, 1)
    me = os.getpid()
    pid = nsetup.fork()
    if pid == 0:
        if parent_death:  # the death signal is not inherited across fork
            nsetup.prctl(nsetup.PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != me:
                os._exit(setup_exit)
        return
    _reap(pid)


def _children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except OSError:  # kernels without CONFIG_PROC_CHILDREN
        return reaper.children_of(me)


def _reap(program: int) -> NoReturn:
    code = 128 + signal.SIGKILL
    try:
        os.closerange(0, os.sysconf("SC_OPEN_MAX"))
        status = None
        while True:
            try:
                pid, wait_status = os.waitpid(-1, 0)
            except ChildProcessError:  # nothing of the run is left
                break
            if pid == program:
                status = wait_status
            if status is not None:
                # each death may hand us the dead one's children: sweep again until none is left
                for child in _children():
                    with contextlib.suppress(OSError):
                        os.kill(child, signal.SIGKILL)
        if status is not None:
            exit_code = os.waitstatus_to_exitcode(status)
            code = exit_code if exit_code >= 0 else 128 - exit_code
    finally:
        os._exit(code)
