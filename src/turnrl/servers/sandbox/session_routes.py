"""The session routes (sessions.py): create, run a command, read and write a file, delete.

    POST   /sessions                  {"files": {path: base64}, "ttl_s": 900}  -> 201 {"session_id", "expires_in_s"}
    POST   /sessions/{id}/run         {"command": str, "timeout_s": 30, "stdin": ""}
                                      -> 200 {"return_code", "stdout", "stderr", "timed_out", "execution_time",
                                              "status", "message"}
    GET    /sessions/{id}/files?path=P            -> 200 {"path": P, "content": base64}
    PUT    /sessions/{id}/files?path=P {"content"} -> 204
    DELETE /sessions/{id}                          -> 204

Refusals are /run_code's one-line `detail`s: 400 a path out of the session or through a link,
404 an unknown session or file, 409 a second command while one runs or a session past its limits,
410 a session that expired or was deleted (saying which), 413 a size limit, 422 a malformed body,
503 all sessions taken (--max-sessions) or all workers busy.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field, ValidationError
from starlette.responses import Response

from turnrl.servers.guard import detail, finite_json, wait_for_disconnect
from turnrl.servers.sandbox import session_files
from turnrl.servers.sandbox.schema import BadRequest, one_line, shown
from turnrl.servers.sandbox.sessions import MAX_COMMAND, SessionsFull, decode_files
from turnrl.servers.validation import StrictRequest
from turnrl.servers.validation import describe_validation_error as describe

router = APIRouter()


class CreateSession(StrictRequest):
    files: dict[str, str | None] = Field(default_factory=dict, description="Path -> base64 content.")
    ttl_s: float | None = Field(default=None, description="Lifetime in seconds; null = server default.")


class RunCommand(StrictRequest):
    command: str = Field(description="A bash command line, run as `bash -c COMMAND` in /app.")
    timeout_s: float | None = Field(default=None, description="Wall-clock seconds; null = 30.")
    stdin: str | None = Field(default="", description="Text fed to the command's standard input.")


class WriteFile(StrictRequest):
    content: str = Field(description="The file's bytes, base64.")


EXAMPLES = {
    CreateSession: '{"files": {"src/x.py": "<base64>"}, "ttl_s": 900}',
    RunCommand: '{"command": "ls -la", "timeout_s": 30}',
    WriteFile: '{"content": "<base64>"}',
}


def parse(model: Any, body: bytes, optional: bool = False) -> Any:
    """`body` as `model`, or a one-line BadRequest; an empty body is `{}` when `optional`."""
    if not body.strip():
        if optional:
            return model()
        raise BadRequest(one_line(describe([{"type": "missing", "loc": ("body",)}], [], EXAMPLES[model])))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequest(f"request body: not valid UTF-8 ({err.reason} at byte {err.start})", 400) from None
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        raise BadRequest(
            one_line(describe(list(err.errors()), list(model.model_fields), EXAMPLES[model]))
        ) from None


def _path_of(request: Request) -> str:
    path = request.query_params.get("path")
    if path is None:
        raise BadRequest("path: missing; send ?path=/app/file (or a path relative to /app)", 422)
    return path


@router.post("/sessions")
async def create_session(request: Request) -> Response:
    sandbox = request.app.state.sandbox
    store, cfg = sandbox.sessions, sandbox.cfg
    try:
        req = parse(CreateSession, await request.body(), optional=True)
        ttl = cfg.session_ttl_s if req.ttl_s is None else req.ttl_s
        if not (math.isfinite(ttl) and 0 < ttl <= cfg.session_max_ttl_s):
            raise BadRequest(
                f"ttl_s: must be > 0 and <= {cfg.session_max_ttl_s:g} seconds, got {req.ttl_s!r} "
                "(--session-max-ttl-s)"
            )
        session = await store.create(decode_files(req.files, cfg), ttl)
    except BadRequest as err:
        return detail(str(err), err.status)
    except SessionsFull:
        msg = (
            f"sessions: {len(store.live)} live, the server limit (--max-sessions {cfg.max_sessions}); "
            "delete one or retry later"
        )
        return detail(msg, 503, {"Retry-After": "1"})
    return finite_json({"session_id": session.id, "expires_in_s": session.expires_in()}, 201)


@router.post("/sessions/{sid}/run")
async def run_command(sid: str, request: Request) -> Response:
    sandbox = request.app.state.sandbox
    store = sandbox.sessions
    try:
        session = store.get(sid)
        req = parse(RunCommand, await request.body())
        spec = store.check_command(req.command, req.timeout_s, req.stdin)
        store.begin_command(session)
    except BadRequest as err:
        return detail(str(err), err.status)
    work = asyncio.ensure_future(sandbox.session_answer(session, spec))
    session.running = work
    gone = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server is stopping
        work.cancel()
        raise
    finally:
        gone.cancel()
    if not work.done():  # the client went away: its command is killed now, not at its timeout
        work.cancel()
        await asyncio.wait({work})
        return detail("client: disconnected before the command finished; the command was stopped", 499)
    if work.cancelled():  # the session was deleted or expired meanwhile
        why = store.gone.get(session.id, "removed")
        return detail(f"session {shown(sid)}: {why}; its command was killed", 410)
    return work.result()


@router.get("/sessions/{sid}/files")
async def read_file(sid: str, request: Request) -> Response:
    sandbox = request.app.state.sandbox
    store = sandbox.sessions
    try:
        session = store.get(sid)
        path = _path_of(request)
        parts = store.parts(session, path)
        data = await asyncio.to_thread(
            session_files.read_file, session.root, parts, sandbox.cfg.max_fetch, session.uid
        )
    except BadRequest as err:
        return detail(str(err), err.status)
    return finite_json({"path": path, "content": base64.b64encode(data).decode("ascii")})


@router.put("/sessions/{sid}/files")
async def write_file(sid: str, request: Request) -> Response:
    sandbox = request.app.state.sandbox
    store, cfg = sandbox.sessions, sandbox.cfg
    try:
        session = store.get(sid)
        store.refuse_if_over(session)
        parts = store.parts(session, _path_of(request))
        req = parse(WriteFile, await request.body())
        try:
            data = base64.b64decode(req.content, validate=True)
        except (binascii.Error, ValueError) as err:
            raise BadRequest(f"content: invalid base64 ({err})") from None
        if len(data) > cfg.max_files_bytes:
            raise BadRequest(
                f"content: {len(data)} bytes exceeds the server limit of {cfg.max_files_bytes} bytes "
                "(--max-files-bytes)",
                413,
            )
        usage = await asyncio.to_thread(store.measure, session)
        if usage.over or usage.bytes + len(data) > cfg.session_disk_bytes:
            raise BadRequest(
                f"content: {len(data)} more bytes would pass the session's disk quota "
                f"({usage.bytes} of {cfg.session_disk_bytes} bytes used; --session-disk-bytes)",
                413,
            )
        if usage.entries + len(parts) > cfg.session_max_files:
            raise BadRequest(
                f"path: the session holds {usage.entries} files and dirs, at its limit of "
                f"{cfg.session_max_files} (--session-max-files)",
                413,
            )
        await asyncio.to_thread(session_files.write_file, session.root, parts, data, session.uid)
    except BadRequest as err:
        return detail(str(err), err.status)
    return Response(status_code=204)


@router.delete("/sessions/{sid}")
async def delete_session(sid: str, request: Request) -> Response:
    try:
        await request.app.state.sandbox.sessions.delete(sid)
    except BadRequest as err:
        return detail(str(err), err.status)
    return Response(status_code=204)


def health_of(sandbox: Any) -> dict[str, Any]:
    """The `sessions` block of /health."""
    store, cfg, iso = sandbox.sessions, sandbox.cfg, sandbox.iso
    first = store.uid_of(0)
    notes = []
    if iso.root is None:
        where = "the session's dirs under /tmp/sandbox" if iso.mount_ns else "the session's host dir"
        notes.append(
            f"sessions: no rootfs layer here, so absolute /app, /tests and /logs paths do not exist for "
            f"commands: they run in {where}, given as $TURNRL_WORKSPACE (also $HOME and the cwd), "
            "$TURNRL_TESTS and $TURNRL_LOGS; the file API still takes /app, /tests and /logs paths"
        )
    if first is None:
        notes.append("sessions: no uid layer, so a session's commands run as every other run's uid")
    return {
        "live": len(store.live),
        "max": cfg.max_sessions,
        "created": store.created,
        "expired": store.expired,
        "deleted": store.deleted,
        "commands": store.commands,
        "running": sum(1 for s in store.live.values() if s.running is not None and not s.running.done()),
        "limits": {
            "default_ttl_s": cfg.session_ttl_s,
            "max_ttl_s": cfg.session_max_ttl_s,
            "disk_bytes": cfg.session_disk_bytes,
            "max_files": cfg.session_max_files,
            "max_depth": cfg.session_max_depth,
            "max_command_bytes": min(cfg.max_code, MAX_COMMAND),
            "max_command_timeout_s": cfg.max_run_timeout,
            "max_read_bytes": cfg.max_fetch,
            "max_write_bytes": cfg.max_files_bytes,
        },
        "paths": store.paths("<session root>") if iso.mount_ns else None,
        "uids": None if first is None else [first, first + cfg.max_sessions - 1],
        "notes": notes,
    }
