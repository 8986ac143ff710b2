"""Sessions: a workspace that persists across the commands of one episode.

A session is a root dir under the server's work root (session_files.py: app, tests, logs, tmp)
and, with the uid layer, a uid of its own for its whole life, from a block claimed next to the
worker slots' (probe.claim_uid_block): files one command makes belong to that uid, so the next
command, run as the same uid, may read and change them, while no other session's or run's uid
may. Each command is `bash -c COMMAND` started exactly as a `/run_code` program is (a worker slot
from the same gate, the zygote's prepared sandbox, every layer in force), with the session's dirs
bound at /app, /tests and /logs (rootfs layer), and killed with all it started when it ends.

Limits: per command those of /run_code (timeout, memory, processes, output); per session a disk
quota, a cap on files and on directory depth (checked while a command runs, every
`WATCH_EVERY_S`, and after it: a command that passes one is killed, and the session then refuses
further commands and writes), a lifetime (`ttl_s`, the reaper removes it and everything it made
when it runs out, whoever calls), one command at a time (a second is refused, 409), and a cap on
live sessions (503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from turnrl.servers.sandbox import session_files
from turnrl.servers.sandbox.cleanup import remove_tree
from turnrl.servers.sandbox.config import Language, SandboxConfig
from turnrl.servers.sandbox.isolation import Isolation
from turnrl.servers.sandbox.nsetup import SESSION_DIRS, session_paths
from turnrl.servers.sandbox.runner import Target, Watch
from turnrl.servers.sandbox.schema import BadRequest, check_file_count, decode_file, shown
from turnrl.servers.sandbox.session_files import Usage

logger = logging.getLogger("turnrl.sandbox")

ID_BYTES = 12  # a session id: 24 hex digits
WATCH_FIRST_S = 0.2  # a command's usage is first measured this long after its start ...
WATCH_EVERY_S = 0.25  # ... and then this often until it ends
GONE_KEPT = 4096  # ids of removed sessions remembered, to say "expired" rather than "no such session"
MAX_COMMAND = 128 * 1024 - 1  # the kernel's limit on one argument (MAX_ARG_STRLEN, with its NUL)
DEFAULT_COMMAND_TIMEOUT_S = 30.0


class SessionsFull(Exception):
    pass


@dataclass
class Session:
    id: str
    root: str  # on the host
    index: int  # which of the server's session uids
    uid: int | None
    ttl_s: float
    expires: float  # time.monotonic()
    running: asyncio.Future[Any] | None = None  # the request whose command runs now
    over: str = ""  # why it refuses further commands and writes: a limit it passed
    closing: bool = False
    commands: int = 0

    def expires_in(self) -> float:
        return max(0.0, round(self.expires - time.monotonic(), 3))


@dataclass
class CommandSpec:
    command: str
    timeout_s: float
    stdin: bytes


class SessionStore:
    """The live sessions of one server, their uids, and the reaper of expired ones."""

    def __init__(self, cfg: SandboxConfig, iso: Isolation, work_root: str) -> None:
        self.cfg, self.iso, self.work_root = cfg, iso, work_root
        self.bash: Language | None = cfg.languages().get("bash")
        self.live: dict[str, Session] = {}
        self.gone: OrderedDict[str, str] = OrderedDict()  # id -> why it is gone
        self.free = list(range(cfg.max_sessions))[::-1]
        self.created = self.expired = self.deleted = self.commands = 0
        self.reaper: asyncio.Task[None] | None = None
        self.removing: set[asyncio.Future[None]] = set()  # expired sessions being removed

    # ---- where things are ----

    def uid_of(self, index: int) -> int | None:
        """A session's uid: after the worker slots' in the server's block (probe._claim_uids)."""
        base = self.iso.uid_base
        return None if base is None else base + self.cfg.workers + index

    def paths(self, root: str) -> dict[str, str]:
        """Where a command sees the session's dirs (app, tests, logs), and its temp dir."""
        if self.iso.mount_ns:
            return {**session_paths(self.iso.root is not None), "tmp": "/tmp"}
        return {name: os.path.join(root, name) for name in (*SESSION_DIRS, "tmp")}

    def target(self, session: Session, command: str) -> Target:
        assert self.bash is not None
        where = self.paths(session.root)
        env = self.iso.env(where["app"], [os.path.dirname(self.cfg.python)])
        env.update(
            HOME=where["app"],
            TMPDIR=where["tmp"],
            TURNRL_WORKSPACE=where["app"],
            TURNRL_TESTS=where["tests"],
            TURNRL_LOGS=where["logs"],
        )
        return Target([self.bash.argv[0], "-c", command], env, session.root, session.uid, session=True)

    def measure(self, session: Session) -> Usage:
        cfg = self.cfg
        return session_files.measure(
            session.root, cfg.session_disk_bytes, cfg.session_max_files, cfg.session_max_depth
        )

    def parts(self, session: Session, path: str) -> tuple[str, ...]:
        host_root = None if self.iso.mount_ns else session.root
        return session_files.api_parts(path, self.cfg.session_max_depth, host_root)

    # ---- life ----

    def get(self, sid: str) -> Session:
        """The live session `sid`, or BadRequest: 410 for one removed (saying why), 404."""
        session = self.live.get(sid)
        if session is not None and not session.closing:
            return session
        if sid in self.gone:
            raise BadRequest(f"session {shown(sid)}: {self.gone[sid]}", 410)
        raise BadRequest(f"session {shown(sid)}: no such session", 404)

    async def create(self, files: dict[str, bytes], ttl_s: float) -> Session:
        if self.bash is None:
            raise BadRequest("sessions: this host has no bash to run commands with", 501)
        if not self.free:
            raise SessionsFull
        index = self.free.pop()
        root = ""
        try:
            root = tempfile.mkdtemp(dir=self.work_root, prefix="session-")
            uid = self.uid_of(index)
            session = Session(secrets.token_hex(ID_BYTES), root, index, uid, ttl_s, time.monotonic() + ttl_s)
            parts = [(self.parts(session, path), data) for path, data in files.items()]
            if sum(len(data) for data in files.values()) <= 64 << 10:
                self._populate(root, uid, parts)
            else:
                await asyncio.to_thread(self._populate, root, uid, parts)
        except BaseException:
            if root:
                await asyncio.to_thread(remove_tree, root)
            self.free.append(index)
            raise
        self.live[session.id] = session
        self.created += 1
        if self.reaper is None:
            self.reaper = asyncio.ensure_future(self.reap_forever())
        return session

    def _populate(self, root: str, uid: int | None, files: list[tuple[tuple[str, ...], bytes]]) -> None:
        session_files.make_root(root, uid)
        for parts, data in files:
            session_files.write_file(root, parts, data, uid)
        usage = session_files.measure(
            root, self.cfg.session_disk_bytes, self.cfg.session_max_files, self.cfg.session_max_depth
        )
        if usage.over:
            raise BadRequest(f"files: the session's files would pass its limits ({usage.over})", 413)

    async def remove(self, session: Session, why: str) -> None:
        """Kill its command, if one runs, and remove its root; its uid is then free again."""
        if session.closing:
            return
        session.closing = True
        self.gone[session.id] = why
        while len(self.gone) > GONE_KEPT:
            self.gone.popitem(last=False)
        try:
            task = session.running
            if task is not None and not task.done():
                task.cancel()  # the runner kills the command and waits for it
                await asyncio.wait({task})
            await asyncio.to_thread(remove_tree, session.root)
        finally:
            self.live.pop(session.id, None)
            self.free.append(session.index)

    async def delete(self, sid: str) -> None:
        """Idempotent: a session already removed is fine; one never seen is a 404."""
        if sid in self.gone and sid not in self.live:
            return
        session = self.live.get(sid)
        if session is None:
            raise BadRequest(f"session {shown(sid)}: no such session", 404)
        self.deleted += 1
        await self.remove(session, "deleted; its files were removed")

    async def reap_forever(self) -> None:
        """Remove each session when its ttl_s runs out, whether or not anyone calls."""
        while True:
            now = time.monotonic()
            for session in [s for s in self.live.values() if s.expires <= now and not s.closing]:
                self.expired += 1
                why = f"expired (its ttl_s of {session.ttl_s:g} s ran out); its files were removed"
                # beside the reaper: a big tree takes a while to remove (rmdir costs ms on some disks)
                task = asyncio.ensure_future(self.remove(session, why))
                self.removing.add(task)
                task.add_done_callback(self._removed)
            upcoming = [s.expires for s in self.live.values() if not s.closing]
            wait = min(upcoming, default=now + 1.0) - time.monotonic()
            await asyncio.sleep(min(max(wait, 0.02), 1.0))

    def _removed(self, task: asyncio.Future[None]) -> None:
        self.removing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("removing an expired session failed: %r", task.exception())

    async def close(self) -> None:
        if self.reaper is not None:
            self.reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reaper
        if self.removing:
            await asyncio.wait(set(self.removing))
        for session in list(self.live.values()):
            with contextlib.suppress(Exception):
                await self.remove(session, "the server stopped")

    # ---- commands ----

    def watcher(self, session: Session) -> Watch:
        """While a command runs: the limit the session passed, once it passes one."""

        async def watch() -> str:
            await asyncio.sleep(WATCH_FIRST_S)
            while True:
                with contextlib.suppress(OSError):
                    usage = await asyncio.to_thread(self.measure, session)
                    if usage.over:
                        return usage.over
                await asyncio.sleep(WATCH_EVERY_S)

        return watch

    def check_command(self, command: str, timeout_s: float | None, stdin: str | None) -> CommandSpec:
        cfg = self.cfg
        size = len(command.encode("utf-8", "surrogatepass"))
        longest = min(cfg.max_code, MAX_COMMAND)
        if size > longest:
            raise BadRequest(
                f"command: {size} bytes exceeds the limit of {longest} bytes (one argument of bash -c); "
                "write a long script with the file API and run it",
                413,
            )
        if "\x00" in command:
            raise BadRequest("command: must not contain NUL bytes")
        timeout = min(DEFAULT_COMMAND_TIMEOUT_S, cfg.max_run_timeout) if timeout_s is None else timeout_s
        if not (timeout > 0 and timeout <= cfg.max_run_timeout):  # NaN fails too
            raise BadRequest(
                f"timeout_s: must be > 0 and <= {cfg.max_run_timeout:g} seconds, got {timeout_s!r} "
                "(--max-run-timeout)"
            )
        data = (stdin or "").encode("utf-8", "surrogatepass")
        if len(data) > cfg.max_stdin:
            raise BadRequest(
                f"stdin: {len(data)} bytes exceeds the server limit of {cfg.max_stdin} bytes (--max-stdin)",
                413,
            )
        return CommandSpec(command, float(timeout), data)

    def refuse_if_over(self, session: Session) -> None:
        if session.over:
            raise BadRequest(
                f"session {shown(session.id)}: passed its limits ({session.over}); it refuses further "
                "commands and writes (read its files, or delete it)",
                409,
            )

    def begin_command(self, session: Session) -> None:
        if session.running is not None and not session.running.done():
            raise BadRequest(
                f"session {shown(session.id)}: a command is already running; a session runs one "
                "command at a time (wait for its answer)",
                409,
            )
        self.refuse_if_over(session)


def decode_files(raw: dict[str, str | None], cfg: SandboxConfig) -> dict[str, bytes]:
    """A create request's files, decoded, within /run_code's bounds on count and total size."""
    check_file_count(raw, cfg)
    out: dict[str, bytes] = {}
    total = 0
    for path, content in raw.items():
        out[path] = decode_file(f"files[{shown(path)}]", content, total, cfg)
        total += len(out[path])
    return out


def command_result(result: dict[str, Any], over: str, killed: bool = False) -> dict[str, Any]:
    """A /run_code response as a session command's answer; `over`: the limit the session passed
    during it ('' = none), `killed`: the command was stopped for it rather than ending first."""
    run = result.get("run_result") or {}
    status = run.get("status") or "Error"
    message = result.get("message") or ""
    if result.get("status") == "SandboxError":
        status = "Error"
    if over:
        status = "Error"
        what = "the command was killed, and the session" if killed else "the session"
        said = f"the session passed its limits ({over}): {what} refuses further commands and writes"
        message = "; ".join(m for m in [said, message] if m)
    return {
        "return_code": run.get("return_code"),
        "stdout": run.get("stdout") or "",
        "stderr": run.get("stderr") or "",
        "timed_out": status == "TimeLimitExceeded",
        "execution_time": run.get("execution_time") or 0.0,
        "status": status,
        "message": message,
    }
