"""The server's side of the zygote (zygote.py): start it, send it runs, hear their ends, and start
a new one when it dies. If it dies, the runs in flight are answered as sandbox errors (their
processes die with it) and the next request starts a new zygote."""

from __future__ import annotations

import array
import asyncio
import contextlib
import itertools
import os
import pickle
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from turnrl.servers.sandbox import nsetup
from turnrl.servers.sandbox.isolation import Isolation
from turnrl.servers.sandbox.launch import RunRequest
from turnrl.servers.sandbox.zygote import MAX_MESSAGE, Boot, Order

# The zygote's command line, visible to programs as /proc/1/cmdline of their PID namespace (init
# is a copy of it): no path of the host, no setting of the server. sys.path comes over the socket.
BOOT = (
    "import pickle, socket, sys\n"
    "control = socket.socket(fileno=0)\n"
    "sys.path[:] = pickle.loads(control.recv(1 << 20))\n"
    "from turnrl.servers.sandbox.zygote import main\n"
    "main(control)\n"
)
START_TIMEOUT_S = 10.0  # how long a request may wait for the zygote's answer before it counts as hung


class ZygoteDied(Exception):
    """The zygote went away while a run was being started or was running."""


def supported() -> str | None:
    """None if this host can run a zygote, else why not."""
    if not hasattr(os, "pidfd_open") or nsetup.LIBC is None:
        return "needs Linux (pidfd_open)"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as err:
        return f"pidfd_open: {err.strerror}"
    return None


@dataclass
class Launch:
    """One run as the zygote reports it."""

    started: asyncio.Future[tuple[int, int | None]]  # (launcher pid, init pid)
    exited: asyncio.Future[int]  # the wait status


@dataclass
class ZygoteClient:
    """Lives on the event loop's thread (the zygote's parent-death signal is tied to the thread
    that started it)."""

    iso: Isolation = field(repr=False)
    workers: int
    tmpfs_MB: int
    work_root: str
    python: str = sys.executable
    proc: subprocess.Popen[bytes] | None = None
    control: socket.socket | None = None
    launches: dict[int, Launch] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    restarts: int = 0
    ready: asyncio.Future[int] | None = None

    @property
    def alive(self) -> bool:
        return self.control is not None

    def start(self) -> None:
        """Start the zygote; it imports in the background while requests queue on the socket."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [self.python, "-I", "-S", "-c", BOOT],
                stdin=theirs.fileno(),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # nothing of the server's
                start_new_session=True,  # the terminal's Ctrl-C is for the server, which then stops us
            )
        finally:
            theirs.close()
        iso = Isolation(**{**self.iso.__dict__, "uid_lock_fd": None})  # the lock stays the server's
        ours.send(pickle.dumps(list(sys.path)))
        ours.send(pickle.dumps(Boot(os.getpid(), iso, self.workers, self.tmpfs_MB, self.work_root)))
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        loop.add_reader(ours.fileno(), self._on_message)
        self.control, self.ready = ours, loop.create_future()

    async def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the zygote has started up; raises ZygoteDied if it does not."""
        assert self.ready is not None
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), timeout)
        except TimeoutError:
            self._lost(f"not ready within {timeout:g}s")
            raise ZygoteDied(f"not ready within {timeout:g}s") from None

    async def launch(
        self, slot: int, half: int, request: RunRequest, fds: list[int]
    ) -> tuple[int, tuple[int, int | None], asyncio.Future[int]]:
        """Ask for a run in cell (slot, half) whose stdin, stdout and stderr are `fds` (closed here
        once sent). Returns once its sandbox has it: (run id, (launcher, init), future status)."""
        try:
            if not self.alive:
                self.restart()
            assert self.control is not None
            run_id = next(self.ids)
            loop = asyncio.get_running_loop()
            launch = Launch(loop.create_future(), loop.create_future())
            self.launches[run_id] = launch
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            try:
                self.control.sendmsg([pickle.dumps(Order(run_id, slot, half, request))], rights)
            except OSError as err:  # a full socket buffer too: the zygote stopped reading
                self._lost(f"could not reach it: {err}")
        finally:
            for fd in fds:
                os.close(fd)
        try:
            pids = await asyncio.wait_for(asyncio.shield(launch.started), START_TIMEOUT_S)
        except TimeoutError:
            self._lost(f"no answer within {START_TIMEOUT_S:g}s")  # hung: kill it, start afresh
            raise ZygoteDied(f"no answer within {START_TIMEOUT_S:g}s") from None
        return run_id, pids, launch.exited

    def kill(self, run_id: int) -> None:
        """SIGKILL a run's launcher, through the zygote, its parent."""
        if self.control is not None:
            with contextlib.suppress(OSError):
                self.control.send(pickle.dumps(run_id))

    def _on_message(self) -> None:
        while self.control is not None:
            try:
                data = self.control.recv(MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError as err:
                self._lost(str(err))
                return
            if not data:
                self._lost("it exited")
                return
            self._dispatch(*pickle.loads(data))

    def _dispatch(self, kind: str, run_id: int, value: Any) -> None:
        if kind == "ready":
            if self.ready is not None and not self.ready.done():
                self.ready.set_result(value)
            return
        launch = self.launches.get(run_id)
        if launch is None:
            return
        if kind == "started":
            launch.started.set_result(value)
        elif kind == "failed":
            del self.launches[run_id]
            launch.started.set_exception(OSError(value))
        else:
            del self.launches[run_id]
            launch.exited.set_result(value)

    def _lost(self, why: str) -> None:
        """The zygote is gone (or useless): fail what waits on it; the next run starts another."""
        if self.control is not None:
            asyncio.get_running_loop().remove_reader(self.control.fileno())
            self.control.close()
            self.control = None
        self._stop_process()
        waiting: list[asyncio.Future[Any]] = [
            f for lc in self.launches.values() for f in (lc.started, lc.exited)
        ]
        self.launches = {}
        for future in [*waiting, *([self.ready] if self.ready is not None else [])]:
            if not future.done():
                future.set_exception(ZygoteDied(why))
                future.exception()  # retrieved here: a run may only ever look at one of its two

    def _stop_process(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()  # its sandboxes die with it (PR_SET_PDEATHSIG)
            proc.wait()

    def describe(self) -> dict[str, Any]:
        """For /health: the zygote's pid (None between a death and the next run) and restarts."""
        return {"pid": self.proc.pid if self.proc is not None else None, "restarts": self.restarts}

    def restart(self) -> None:
        self.restarts += 1
        self.start()

    def close(self) -> None:
        if self.control is not None:
            self._lost("the server is stopping")
