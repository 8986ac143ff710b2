"""Starting a run's process and watching it: its stdin, its capped output, its exit.

Two ways, one interface (`Spawned`):

- `spawn_by_zygote`: a sandbox the zygote (zygote.py) prepared for the slot takes the run; the
  server hands over the pipe ends and hears the exit status back. The default.
- `spawn_forked`: the server forks the run itself through asyncio's subprocess support, with
  `Isolation.preexec`'s function as preexec_fn. The fallback where no zygote can run.

Either way the process the server sees (`pid`) is the first one forked: with a PID namespace the
launcher, with a run reaper the reaper, else the program itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from turnrl.servers.sandbox.launch import RunRequest
from turnrl.servers.sandbox.zygote_client import ZygoteClient


@dataclass
class CappedOutput:
    """Bytes kept up to `cap`; everything past it is read (so the writer never blocks) and counted."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.kept)

    def text(self) -> str:
        # binary output must never break the JSON response
        return self.kept.decode("utf-8", errors="replace")


class RunProtocol(asyncio.SubprocessProtocol):
    """Collects a run's output as it arrives and tells apart the program's exit from EOF."""

    def __init__(self, out: CappedOutput, err: CappedOutput) -> None:
        loop = asyncio.get_running_loop()
        self.streams = {1: out, 2: err}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.eof: dict[int, asyncio.Future[None]] = {1: loop.create_future(), 2: loop.create_future()}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.streams[fd].add(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self.eof and not self.eof[fd].done():
            self.eof[fd].set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class Spawned:
    """A started run: its pid, and its exit as `protocol.exited` and `returncode()`."""

    pid: int
    protocol: RunProtocol
    lost: str | None = None  # why the run's end could not be observed (its zygote died)
    spare: frozenset[int] = frozenset()  # in the run's cgroup, but reports its end: not to be swept

    async def exit_within(self, seconds: float) -> bool:
        """Whether the process has exited, waiting at most `seconds` for it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.protocol.exited), seconds)
        return self.protocol.exited.done()

    def returncode(self) -> int | None:
        """The exit status; negative for death by signal, as subprocess reports it."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the pipes; kill the process if it is still there."""
        raise NotImplementedError


class ForkedRun(Spawned):
    def __init__(self, transport: asyncio.SubprocessTransport, protocol: RunProtocol) -> None:
        self.transport, self.protocol, self.pid = transport, protocol, transport.get_pid()

    def returncode(self) -> int | None:
        return self.transport.get_returncode()

    def close(self) -> None:
        self.transport.close()


async def spawn_forked(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    preexec: Callable[[], None],
    stdin: bytes,
    protocol: RunProtocol,
) -> Spawned:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.subprocess_exec(
        lambda: protocol,
        *argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        preexec_fn=preexec,
        start_new_session=True,
    )
    pipe = transport.get_pipe_transport(0)
    assert isinstance(pipe, asyncio.WriteTransport)
    _feed(pipe, stdin)
    return ForkedRun(transport, protocol)


def _feed(pipe: asyncio.WriteTransport, data: bytes) -> None:
    if data:
        pipe.write(data)  # buffered by the transport; a program that never reads just exits
    pipe.close()  # after the buffer is flushed


class _PipeReader(asyncio.Protocol):
    """One output pipe of a zygote-forked run, passed on to its RunProtocol as fd 1 or 2."""

    def __init__(self, run: RunProtocol, fd: int) -> None:
        self.run, self.fd = run, fd

    def data_received(self, data: bytes) -> None:
        self.run.pipe_data_received(self.fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.run.pipe_connection_lost(self.fd, exc)


class ZygoteRun(Spawned):
    def __init__(
        self, zygote: ZygoteClient, run_id: int, pids: tuple[int, int | None], protocol: RunProtocol
    ) -> None:
        self.zygote, self.run_id, self.protocol = zygote, run_id, protocol
        self.pid, init = pids
        self.spare = frozenset() if init is None else frozenset({init})  # init waits in the cgroup
        self.pipes: list[asyncio.BaseTransport] = []
        self.status: int | None = None

    def on_exit(self, done: asyncio.Future[int]) -> None:
        if done.cancelled() or done.exception() is not None:
            self.lost = "the zygote that started the run died; the run was killed with it"
        else:
            self.status = done.result()
        self.protocol.process_exited()

    def returncode(self) -> int | None:
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.close()
        if not self.protocol.exited.done():
            self.zygote.kill(self.run_id)  # the zygote, its parent, can: the pid is not reused yet


async def spawn_by_zygote(
    zygote: ZygoteClient, slot: int, half: int, request: RunRequest, stdin: bytes, protocol: RunProtocol
) -> Spawned:
    loop = asyncio.get_running_loop()
    pipes = [os.pipe() for _ in range(3)]  # non-inheritable; the sandbox moves them to 0-2
    theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
    ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
    try:
        run_id, pids, exited = await zygote.launch(slot, half, request, theirs)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    run = ZygoteRun(zygote, run_id, pids, protocol)
    for fd in (1, 2):
        reader = open(ours[fd], "rb", buffering=0)  # noqa: SIM115 (the transport owns and closes it)
        transport, _ = await loop.connect_read_pipe(lambda fd=fd: _PipeReader(protocol, fd), reader)
        run.pipes.append(transport)
    if stdin:
        writer = open(ours[0], "wb", buffering=0)  # noqa: SIM115
        pipe, _ = await loop.connect_write_pipe(asyncio.Protocol, writer)
        run.pipes.append(pipe)
        _feed(pipe, stdin)
    else:
        os.close(ours[0])  # EOF at once, as an empty pipe would give
    exited.add_done_callback(run.on_exit)
    return run
