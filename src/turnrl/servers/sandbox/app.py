"""The HTTP service: SandboxFusion's `POST /run_code`, plus `GET /health`.

At most `workers` runs execute at once and at most `queue` more wait; a request beyond that is
answered 503 at once (with Retry-After) so callers back off instead of piling up timeouts.
Refused requests get `{"detail": "<field>: <reason>"}` with a 4xx status; the server keeps serving.

`Guard` (turnrl.servers.guard) stands in front of every route: the API key (`cfg.api_key`) and the
body limit (`cfg.max_body`, enforced while a chunked body streams in). The body is parsed by
`schema.parse_request`, whatever its content type. A client that goes away before its answer has
its run killed, its worker slot freed and its work dir removed at once, instead of at the run's
timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse
from starlette.responses import Response

from turnrl import __version__
from turnrl.servers.guard import Guard, detail, finite_json, wait_for_disconnect
from turnrl.servers.listen import connection_health
from turnrl.servers.sandbox.cleanup import remove_tree
from turnrl.servers.sandbox.config import SandboxConfig
from turnrl.servers.sandbox.isolation import Isolation
from turnrl.servers.sandbox.runner import Runner
from turnrl.servers.sandbox.schema import (
    BadRequest,
    RunSpec,
    check_request,
    parse_request,
    response,
    run_result,
)
from turnrl.servers.sandbox.session_routes import health_of as sessions_health
from turnrl.servers.sandbox.session_routes import router as session_router
from turnrl.servers.sandbox.sessions import CommandSpec, Session, SessionStore, command_result

logger = logging.getLogger("turnrl.sandbox")


class Overloaded(Exception):
    pass


class Gate:
    """Hands out worker slots (each slot owns a uid and a cgroup) with a bounded wait queue."""

    def __init__(self, workers: int, queue: int) -> None:
        self.workers, self.queue = workers, queue
        self.free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(workers):
            self.free.put_nowait(slot)
        self.waiting = 0
        self.completed = 0
        self.rejected = 0

    @property
    def running(self) -> int:
        return self.workers - self.free.qsize()

    async def acquire(self) -> int:
        if self.free.empty() and self.waiting >= self.queue:
            self.rejected += 1
            raise Overloaded
        self.waiting += 1
        try:
            return await self.free.get()
        finally:
            self.waiting -= 1

    def release(self, slot: int) -> None:
        self.completed += 1
        self.free.put_nowait(slot)


class Sandbox:
    """What the routes serve from (`app.state.sandbox`): the settings, the isolation, the runner and,
    once the app is serving, the gate of worker slots (asyncio objects belong to the serving loop)."""

    def __init__(self, cfg: SandboxConfig, iso: Isolation, work_root: str) -> None:
        self.cfg, self.iso, self.work_root = cfg, iso, work_root
        self.languages = cfg.languages()
        self.runner = Runner(cfg, iso, work_root)
        self.sessions = SessionStore(cfg, iso, work_root)
        self.gate: Gate | None = None

    def _overloaded(self) -> Response:
        gate = self.gate
        assert gate is not None
        msg = (
            f"sandbox overloaded: {gate.running} running and {gate.waiting} queued (the limits); retry later"
        )
        body = {"detail": msg, "status": "SandboxError", "message": msg}
        return finite_json(body, 503, {"Retry-After": "1"})

    async def answer(self, spec: RunSpec) -> Response:
        """Wait for a worker slot, run, free the slot: the answer to one checked request."""
        gate = self.gate
        assert gate is not None
        try:
            slot = await gate.acquire()
        except Overloaded:
            return self._overloaded()
        try:
            result = await self.runner.run(spec, slot)
        except BadRequest as err:  # the request's own files could not be written
            return detail(str(err), err.status)
        except Exception as err:  # a bug here must still answer in SandboxFusion's shape
            logger.exception("run failed inside the sandbox server")
            result = response(
                "SandboxError", f"internal error: {type(err).__name__}: {err}", run_result("Error")
            )
        finally:
            gate.release(slot)
        return finite_json(result)

    async def session_answer(self, session: Session, command: CommandSpec) -> Response:
        """A session's command through a worker slot, as a /run_code program runs, watched for
        the session's limits while it runs and measured after it."""
        gate, store = self.gate, self.sessions
        assert gate is not None
        try:
            slot = await gate.acquire()
        except Overloaded:
            return self._overloaded()
        assert store.bash is not None
        spec = RunSpec(b"", store.bash, command.timeout_s, self.cfg.default_memory_MB, command.stdin)
        stopped = ""
        try:
            target = store.target(session, command.command)
            result, stopped = await self.runner.run_command(spec, slot, target, store.watcher(session))
        except Exception as err:
            logger.exception("a session's command failed inside the sandbox server")
            result = response(
                "SandboxError", f"internal error: {type(err).__name__}: {err}", run_result("Error")
            )
        finally:
            gate.release(slot)
        session.commands += 1
        store.commands += 1
        # a command that ended before the watcher saw it pass a limit is caught here, and answered alike
        over = stopped or (await asyncio.to_thread(store.measure, session)).over
        if over:
            session.over = over
        return finite_json(command_result(result, over, killed=bool(stopped)))


def create_app(cfg: SandboxConfig, iso: Isolation, work_root: str) -> FastAPI:
    """The app; it owns `iso` and `work_root` and releases both at shutdown. The routes are
    module-level (`ROUTERS`) and serve `app.state.sandbox`."""
    sandbox = Sandbox(cfg, iso, work_root)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sandbox.gate = Gate(cfg.workers, cfg.queue)
        await sandbox.runner.start()
        if sandbox.runner.spawner_note:
            iso.notes.append(sandbox.runner.spawner_note)
        try:
            yield
        finally:
            await sandbox.sessions.close()
            await sandbox.runner.kill_all()
            sandbox.runner.close()
            iso.close()
            remove_tree(work_root)

    app = FastAPI(title="turnrl sandbox", version=__version__, lifespan=lifespan)
    # outermost: the key and the body limit come before routing and before any body is parsed
    app.add_middleware(Guard, api_key=cfg.api_key, max_body=cfg.max_body)
    app.state.sandbox = sandbox
    for r in ROUTERS:
        app.include_router(r)
    return app


router = APIRouter()
# a new route is one module with an `APIRouter` and one line in this table
ROUTERS: list[APIRouter] = [router, session_router]


@router.post("/run_code")
async def run_code(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    try:
        spec = check_request(parse_request(await request.body()), sandbox.cfg, sandbox.languages)
    except BadRequest as err:
        return detail(str(err), err.status)
    work = asyncio.ensure_future(sandbox.answer(spec))
    gone = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server is stopping: the run stops with it
        work.cancel()
        raise
    finally:
        gone.cancel()
    if not work.done():
        # the client has gone and nobody will read the answer: kill the run now, which frees
        # its slot and removes its work dir, rather than let it hold both until its timeout
        work.cancel()
        await asyncio.wait({work})  # its clean-up (wait never cancels what it waits for)
        return detail("client: disconnected before the run finished; the run was stopped", 499)
    return work.result()


@router.get("/v1/ping", response_class=PlainTextResponse)
async def ping() -> str:
    return "pong"  # SandboxFusion's liveness probe, for tools written against it


@router.get("/health")
async def health(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    cfg, iso, gate = sandbox.cfg, sandbox.iso, sandbox.gate
    assert gate is not None
    uid = iso.uid(0)
    return finite_json(
        {
            "status": "ok",
            "connections": connection_health(request.app),
            "version": __version__,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "languages": sorted(sandbox.languages),
            "isolation": {
                "mode": iso.mode,
                "server_is_root": os.geteuid() == 0,
                "layers": iso.layers(),
                "network_isolated": iso.net_ns,
                "uids": None if uid is None else [uid, uid + cfg.workers - 1],
                "notes": iso.notes,
            },
            "capacity": {
                "workers": cfg.workers,
                "queue": cfg.queue,
                "running": gate.running,
                "queued": gate.waiting,
                "completed": gate.completed,
                "rejected": gate.rejected,
            },
            "limits": limits_of(cfg),
            "api_key": bool(cfg.api_key),  # whether one is required, never the key
            "work_root": sandbox.work_root,
            "zygote": None if sandbox.runner.zygote is None else sandbox.runner.zygote.describe(),
            "sessions": sessions_health(sandbox),
        }
    )


def limits_of(cfg: SandboxConfig) -> dict[str, float | int]:
    """The per-run limits /health advertises (its clients split and size their requests by them)."""
    return {
        "default_run_timeout": cfg.default_run_timeout,
        "max_run_timeout": cfg.max_run_timeout,
        "default_memory_MB": cfg.default_memory_MB,
        "max_memory_MB": cfg.max_memory_MB,
        "max_processes": cfg.max_processes,
        "max_output_bytes": cfg.max_output,
        "max_code_bytes": cfg.max_code,
        "max_stdin_bytes": cfg.max_stdin,
        "max_files": cfg.max_files,
        "max_files_bytes": cfg.max_files_bytes,
        "max_fetch_bytes": cfg.max_fetch,
        "max_body_bytes": cfg.max_body,
    }
