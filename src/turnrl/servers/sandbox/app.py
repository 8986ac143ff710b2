"""The HTTP service: SandboxFusion's `POST /run_code`, plus `GET /health`.

At most `workers` runs execute at once and at most `queue` more wait; a request beyond that is
answered 503 at once (with Retry-After) so callers back off instead of piling up timeouts.
Refused requests get `{"detail": "<field>: <reason>"}` with a 4xx status; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from turnrl import __version__
from turnrl.servers.sandbox.config import SandboxConfig
from turnrl.servers.sandbox.isolation import Isolation
from turnrl.servers.sandbox.runner import Runner
from turnrl.servers.sandbox.schema import (
    BadRequest,
    RunCodeRequest,
    check_request,
    describe_validation_error,
    response,
    run_result,
)

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


class BodyLimit:
    """ASGI middleware refusing oversized bodies from their Content-Length, before reading them."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length", b"")
            if length.isdigit() and int(length) > self.limit:
                msg = f"request body: {int(length)} bytes exceeds the server limit of {self.limit} bytes"
                await JSONResponse({"detail": msg}, status_code=413)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(cfg: SandboxConfig, iso: Isolation, work_root: str) -> FastAPI:
    """The app; it owns `iso` and `work_root` and releases both at shutdown."""
    languages = cfg.languages()
    runner = Runner(cfg, iso, work_root)
    state: dict[str, Gate] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state["gate"] = Gate(cfg.workers, cfg.queue)  # asyncio objects belong to the serving loop
        await runner.start()
        if runner.spawner_note:
            iso.notes.append(runner.spawner_note)
        try:
            yield
        finally:
            await runner.kill_all()
            runner.close()
            iso.close()
            shutil.rmtree(work_root, ignore_errors=True)

    app = FastAPI(title="turnrl sandbox", version=__version__, lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=cfg.max_body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": describe_validation_error(list(exc.errors()))}, status_code=422)

    @app.post("/run_code")
    async def run_code(req: RunCodeRequest) -> JSONResponse:
        try:
            spec = check_request(req, cfg, languages)
        except BadRequest as err:
            return JSONResponse({"detail": str(err)}, status_code=err.status)
        gate = state["gate"]
        try:
            slot = await gate.acquire()
        except Overloaded:
            msg = f"sandbox overloaded: {gate.running} running and {gate.waiting} queued (the limits); retry later"
            body = {"detail": msg, "status": "SandboxError", "message": msg}
            return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
        try:
            result = await runner.run(spec, slot)
        except Exception as err:  # a bug here must still answer in SandboxFusion's shape
            logger.exception("run failed inside the sandbox server")
            result = response(
                "SandboxError", f"internal error: {type(err).__name__}: {err}", run_result("Error")
            )
        finally:
            gate.release(slot)
        return JSONResponse(result)

    @app.get("/v1/ping", response_class=PlainTextResponse)
    async def ping() -> str:
        return "pong"  # SandboxFusion's liveness probe, for tools written against it

    @app.get("/health")
    async def health() -> dict[str, Any]:
        gate = state["gate"]
        uid = iso.uid(0)
        return {
            "status": "ok",
            "version": __version__,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "languages": sorted(languages),
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
            "limits": {
                "default_run_timeout": cfg.default_run_timeout,
                "max_run_timeout": cfg.max_run_timeout,
                "default_memory_MB": cfg.default_memory_MB,
                "max_memory_MB": cfg.max_memory_MB,
                "max_processes": cfg.max_processes,
                "max_output_bytes": cfg.max_output,
                "max_code_bytes": cfg.max_code,
            },
            "work_root": work_root,
            "zygote": None if runner.zygote is None else runner.zygote.describe(),
        }

    return app
