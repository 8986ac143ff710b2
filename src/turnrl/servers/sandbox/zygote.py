"""The zygote: a small warm process that keeps a sandbox ready for each worker slot's next run.

Forking the server for each run costs more than the run's own set-up: its page tables (FastAPI,
pydantic, the event loop) are copied and the child touches enough of that memory to copy pages
too. And much of a run's set-up does not depend on the request at all: the network, mount and PID
namespaces, the minimal root, the namespace's init and its /proc, the cgroup (joining one waits
for an RCU grace period). The zygote is a fresh interpreter (`python -I -S`, only this package's
system-call modules imported; zygote_client.py starts it) that forks one sandbox per worker slot
ahead of time and lets it do all of that (launch.prepared), so a request waits only for what is
its own: the work dir, rlimits, the uid drop, seccomp, and the program.

Every run still gets a fresh process in fresh namespaces, its own cgroup limits and its own work
dir: a prepared sandbox serves exactly one request, and the next one for the slot is prepared in
the slot's other cgroup cell while the current run uses this one (the kill sweep after a run
empties its cell; the sandbox waiting in the other cell is untouched).

Messages on the control socket (SOCK_SEQPACKET, pickled):

    server -> zygote   `Order` (a run for cell (slot, half)) with the run's stdin, stdout and
                       stderr pipe ends (SCM_RIGHTS); or a run id to kill
    zygote -> server   ("ready", -1, pid) once; per run ("started", id, (launcher pid, init pid
                       or None)) or ("failed", id, why), then ("exited", id, wait status)

The zygote holds nothing of any run once the run's request is handed over (it closes the pipe
ends), runs with a scrubbed environment, and its sandboxes die with it through PR_SET_PDEATHSIG,
as it dies with the server.
"""

from __future__ import annotations

import array
import contextlib
import gc
import os
import pickle
import select
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from turnrl.servers.sandbox import launch, nsetup
from turnrl.servers.sandbox.isolation import Isolation
from turnrl.servers.sandbox.launch import SETUP_EXIT, RunRequest

MAX_MESSAGE = 1 << 20


@dataclass
class Boot:
    """What the zygote is told once, after its interpreter has started."""

    server_pid: int
    iso: Isolation
    workers: int
    tmpfs_MB: int
    work_root: str


@dataclass
class Order:
    """One run, as the server sends it."""

    run_id: int
    slot: int
    half: int  # which of the slot's two cgroup cells
    request: RunRequest


@dataclass
class Sandbox:
    """A sandbox the zygote forked: prepared, or running its request."""

    cell: tuple[int, int]
    launcher: int
    pidfd: int
    channel: socket.socket
    init: int | None = None
    ready: bool = False
    failure: str = ""
    run_id: int | None = None
    pending: tuple[Order, list[int]] | None = None  # a request that came before READY
    reported: bool = False  # the run's exit was sent to the server
    channel_open: bool = True
    reaped: bool = False


class Zygote:
    def __init__(self, control: socket.socket, boot: Boot) -> None:
        self.control, self.boot = control, boot
        self.poller = select.poll()
        self.poller.register(control, select.POLLIN)
        self.by_fd: dict[int, Sandbox] = {}  # channel or pidfd -> its sandbox
        self.prepared: dict[tuple[int, int], Sandbox] = {}
        self.orders = 0

    def serve(self) -> None:
        self.send(("ready", -1, os.getpid()))
        for slot in range(self.boot.workers):  # each slot's first run uses its cell 0
            self.prepare((slot, 0))
        while True:
            for fd, _ in self.poller.poll():
                if fd == self.control.fileno():
                    if not self.on_control():
                        return
                elif fd in self.by_fd:
                    sandbox = self.by_fd[fd]
                    if fd == sandbox.pidfd:
                        self.on_exit(sandbox)
                    else:
                        self.on_channel(sandbox)

    def send(self, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # the server is gone: the next receive says so
            self.control.send(pickle.dumps(message))

    # ---- sandboxes ----

    def prepare(self, cell: tuple[int, int]) -> Sandbox:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        boot = self.boot
        child = boot.iso.prepare(cell[0], cell[1], boot.tmpfs_MB, boot.work_root, theirs.fileno())
        pid = os.fork()
        if pid == 0:
            _become_sandbox(theirs.fileno(), child)
        theirs.close()
        ours.setblocking(False)
        sandbox = Sandbox(cell, pid, os.pidfd_open(pid), ours)
        for fd in (sandbox.pidfd, ours.fileno()):
            self.by_fd[fd] = sandbox
            self.poller.register(fd, select.POLLIN)
        self.prepared[cell] = sandbox
        return sandbox

    def on_control(self) -> bool:
        fds = array.array("i")
        space = socket.CMSG_SPACE(3 * fds.itemsize)
        data, ancillary, _, _ = self.control.recvmsg(MAX_MESSAGE, space, socket.MSG_CMSG_CLOEXEC)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:  # the server closed its end: it is gone or stopping
            for sandbox in self.by_fd.values():
                if not sandbox.reaped:  # not reaped: the pid is still this launcher's
                    with contextlib.suppress(OSError):
                        os.kill(sandbox.launcher, signal.SIGKILL)
            return False
        message = pickle.loads(data)
        if isinstance(message, Order):
            self.on_order(message, list(fds))
        else:  # a run id to kill: safe here, where the launcher's pid cannot have been reused yet
            for sandbox in list(self.by_fd.values()):
                if sandbox.run_id == message and not sandbox.reaped:
                    with contextlib.suppress(OSError):
                        os.kill(sandbox.launcher, signal.SIGKILL)
        return True

    def on_order(self, order: Order, fds: list[int]) -> None:
        cell = (order.slot, order.half)
        sandbox = self.prepared.pop(cell, None)
        if sandbox is None or sandbox.failure or not sandbox.channel_open:
            # not asked for ahead, or it died waiting (it is reaped on its own): make one now
            sandbox = self.prepare(cell)
            del self.prepared[cell]
        sandbox.run_id = order.run_id
        if sandbox.ready:
            self.hand_over(sandbox, order, fds)
        elif sandbox.failure or not sandbox.channel_open:
            self.refuse(sandbox, fds)
        else:
            sandbox.pending = (order, fds)
        # the slot's next run: its other cell, emptied by the kill sweep after the slot's last run
        other = (order.slot, 1 - order.half)
        if other not in self.prepared:
            self.prepare(other)
        self.orders += 1
        if self.orders % 1000 == 0:
            gc.collect()  # the zygote's own garbage, now and then (see main: gc is frozen)

    def hand_over(self, sandbox: Sandbox, order: Order, fds: list[int]) -> None:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        try:
            sandbox.channel.sendmsg([pickle.dumps(order.request)], rights)
        except OSError as err:
            sandbox.failure = sandbox.failure or f"the prepared sandbox is gone ({err.strerror})"
            self.refuse(sandbox, fds)
            return
        finally:
            sandbox.pending = None
        for fd in fds:
            os.close(fd)
        self.send(("started", order.run_id, (sandbox.launcher, sandbox.init)))

    def refuse(self, sandbox: Sandbox, fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)
        sandbox.pending = None
        why = sandbox.failure.strip() or "the prepared sandbox exited before its request came"
        self.send(("failed", sandbox.run_id, why))
        sandbox.reported = True

    def on_channel(self, sandbox: Sandbox) -> bool:
        """Handle one message from the sandbox; False when none is waiting."""
        try:
            data = sandbox.channel.recv(MAX_MESSAGE)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if data == launch.READY:
            sandbox.ready = True
            if sandbox.pending is not None:
                self.hand_over(sandbox, *sandbox.pending)
        elif data.startswith(launch.INIT):
            sandbox.init = int(data[len(launch.INIT) :])
        elif data.startswith(launch.EXIT):  # from init, before the namespace is torn down
            self.report(sandbox, int(data[len(launch.EXIT) :]))
        elif data:
            sandbox.failure += data.decode(errors="replace")
        else:  # every holder of its end is gone (or exec'd)
            self.poller.unregister(sandbox.channel)
            del self.by_fd[sandbox.channel.fileno()]
            sandbox.channel.close()
            sandbox.channel_open = False
            if sandbox.pending is not None:
                self.refuse(sandbox, sandbox.pending[1])
        return True

    def on_exit(self, sandbox: Sandbox) -> None:
        pid, status = os.waitpid(sandbox.launcher, os.WNOHANG)
        if pid == 0:  # an event meant for a descriptor since closed and reused
            return
        self.poller.unregister(sandbox.pidfd)
        del self.by_fd[sandbox.pidfd]
        os.close(sandbox.pidfd)
        sandbox.reaped = True
        while sandbox.channel_open and self.on_channel(sandbox):
            pass  # init's report, sent before it exited, may still be waiting there
        if self.prepared.get(sandbox.cell) is sandbox:  # died unused: prepare on demand instead
            del self.prepared[sandbox.cell]
        if sandbox.run_id is not None:
            self.report(sandbox, status)

    def report(self, sandbox: Sandbox, status: int) -> None:
        if not sandbox.reported and sandbox.run_id is not None and sandbox.pending is None:
            self.send(("exited", sandbox.run_id, status))
            sandbox.reported = True


def _become_sandbox(channel: int, child: Callable[[], NoReturn]) -> NoReturn:
    try:
        # what the zygote ignores must not stay ignored in the program (a shell pipeline relies on
        # SIGPIPE); subprocess does the same with restore_signals
        for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(channel, 2)  # set-up failures reach the zygote as a message
        # the control socket, other sandboxes' channels and pidfds: nothing of the zygote's
        os.closerange(3, channel)
        os.closerange(channel + 1, os.sysconf("SC_OPEN_MAX"))
        os.setsid()
        child()
    finally:
        os._exit(SETUP_EXIT)


def main(control: socket.socket) -> None:
    """The zygote process's whole life (zygote_client.BOOT runs it)."""
    boot: Boot = pickle.loads(control.recv(MAX_MESSAGE))
    nsetup.prctl(nsetup.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != boot.server_pid:  # the server died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a stray Ctrl-C: die; the server starts another
    control = socket.socket(fileno=os.dup(control.detach()))  # off fd 0
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # A collection in a forked sandbox would walk (and so copy) every page of the zygote's heap:
    # freeze what exists now and collect only in the zygote itself, now and then.
    gc.freeze()
    gc.disable()
    Zygote(control, boot).serve()
