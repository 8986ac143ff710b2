"""The live server's HTTP API (docs/live.md). Every request carries a client's key
(`Authorization: Bearer <key>` or `X-Api-Key`); a session is named by its client in the path.

    POST /sessions/{id}/v1/chat/completions | /v1/responses | /v1/messages   a call, whole or streamed
    GET  /sessions/{id}/v1/models
    POST /sessions/{id}/close                     -> {"id", "calls", "state"}
    POST /sessions/{id}/reward  {"reward": r}     the session's reward (ends it if open)
                                {"reward": r, "call": k}   call k's (0-based); they sum
    POST /preferences {"chosen": id, "rejected": id}         rewards 1 and 0, a group of two
    GET  /status                                  policy version, learning, sessions, counters
    POST /admin/learning {"enabled": bool}        an admin key only: learning off or on, serving goes on

The first call of a new id opens the session for the key's client (its `X-Turnrl-Task` header, if
any, names the task); another client's id is a 409, an id too long or not printable a 400. Every
answer names the policy version that produced it: in its body (`policy_version`) and in the
`X-Turnrl-Policy-Version` header.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from turnrl.agent.gateway.app import add_error_handlers, serve_call
from turnrl.agent.gateway.calls import EventStream
from turnrl.agent.gateway.dialects import DIALECTS
from turnrl.agent.gateway.dialects.base import Dialect
from turnrl.live.keys import Client
from turnrl.live.server import LiveServer
from turnrl.live.store import Refused, Session, finite_reward
from turnrl.servers.guard import Guard, finite_json, presented_key
from turnrl.servers.refusal import Refusal

VERSION_HEADER = "X-Turnrl-Policy-Version"
TASK_HEADER = "x-turnrl-task"


def create_app(server: LiveServer) -> FastAPI:
    app = FastAPI(title="turnrl live server")
    app.add_middleware(Guard, max_body=server.gateway.max_body)  # keys: each route checks its client's
    app.state.gateway = server.gateway
    app.state.live = server
    add_error_handlers(app)
    for dialect in DIALECTS:
        app.add_api_route(f"/sessions/{{sid}}/v1{dialect.path}", _call_route(dialect), methods=["POST"])
    app.add_api_route("/sessions/{sid}/v1/models", _models, methods=["GET"])
    app.add_api_route("/sessions/{sid}/close", _close, methods=["POST"])
    app.add_api_route("/sessions/{sid}/reward", _reward, methods=["POST"])
    app.add_api_route("/preferences", _prefer, methods=["POST"])
    app.add_api_route("/status", _status, methods=["GET"])
    app.add_api_route("/admin/learning", _learning, methods=["POST"])
    return app


def _server(request: Request) -> LiveServer:
    return request.app.state.live  # type: ignore[no-any-return]


def _client(request: Request) -> Client:
    client = _server(request).client_of(presented_key(request.scope))
    if client is None:
        raise Refusal("api key: missing or unknown; send 'Authorization: Bearer <your client key>'", 401)
    return client


def _refusal(err: Refused) -> Refusal:
    return Refusal(str(err), err.status)


def _call_route(dialect: Dialect) -> Callable[[str, Request], Awaitable[Response]]:
    async def call(sid: str, request: Request) -> Response:
        request.state.dialect = dialect
        server, client = _server(request), _client(request)
        task = request.headers.get(TASK_HEADER, "")[:128] or client.name
        try:
            s = server.store.session_for_call(sid, client.name, task, lambda: server.open_episode(sid))
        except Refused as err:
            raise _refusal(err) from None
        try:
            response = await serve_call(dialect, request, server.gateway, s.handle, sid)
        except BaseException:
            server.store.call_done(s)
            raise
        if isinstance(response, EventStream):  # the stream runs after this returns: the version now
            version = str(server.policy_version)  # (its events carry the one that sampled it)
            response.extra_headers.append((VERSION_HEADER.lower().encode(), version.encode()))
            response.on_end = lambda: server.store.call_done(s)
        else:
            response.headers[VERSION_HEADER] = str(_version_of(response, server.policy_version))
            server.store.call_done(s)
        return response

    call.__name__ = f"live_{dialect.name}_call"
    return call


def _version_of(response: Response, default: int) -> int:
    """The policy version a whole answer's body names (the one that sampled it)."""
    try:
        return int(json.loads(response.body)["policy_version"])
    except (ValueError, KeyError, TypeError):  # an error body, or a dialect without the field
        return default


def _owned(request: Request, sid: str) -> tuple[LiveServer, Session]:
    server, client = _server(request), _client(request)
    try:
        return server, server.store.owned(sid, client.name)
    except Refused as err:
        raise _refusal(err) from None


async def _models(sid: str, request: Request) -> Response:
    _client(request)
    model_id = _server(request).gateway.model_id
    card = {"id": model_id, "object": "model", "created": 0, "owned_by": "turnrl"}
    card |= {"type": "model", "display_name": model_id, "created_at": "1970-01-01T00:00:00Z"}
    return finite_json({"object": "list", "data": [card]})


async def _close(sid: str, request: Request) -> Response:
    server, s = _owned(request, sid)
    if s.state != "open":
        raise Refusal(f"session {sid!r}: already ended ({s.why})", 409)
    server.end(s, "client")
    return finite_json({"id": sid, "calls": s.record.get("calls", 0), "state": s.state})


async def _body(request: Request, want: str) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise Refusal(f"body: not JSON; want {want}", 400) from None
    if not isinstance(body, dict):
        raise Refusal(f"body: want {want}", 400)
    return body


async def _reward(sid: str, request: Request) -> Response:
    server, s = _owned(request, sid)
    body = await _body(request, '{"reward": <number>} or {"reward": <number>, "call": <index>}')
    if extra := set(body) - {"reward", "call"}:
        raise Refusal(f"body: unknown key {sorted(extra)[0]!r}; want reward and optionally call", 422)
    call = body.get("call")
    if call is not None and (isinstance(call, bool) or not isinstance(call, int)):
        raise Refusal(f"call: want a 0-based call index, got {json.dumps(call)[:40]}", 422)
    try:
        value = finite_reward(body.get("reward"), "reward")
        if s.state == "open" and call is None:  # a session's reward is its end
            server.end(s, "reward")
        server.store.reward(s, value, call)
    except Refused as err:
        raise _refusal(err) from None
    return finite_json({"id": sid, "reward": value, "call": call, "state": s.state})


async def _prefer(request: Request) -> Response:
    server, client = _server(request), _client(request)
    body = await _body(request, '{"chosen": <session id>, "rejected": <session id>}')
    ids = [body.get("chosen"), body.get("rejected")]
    if set(body) != {"chosen", "rejected"} or not all(isinstance(i, str) for i in ids):
        raise Refusal('body: want {"chosen": <session id>, "rejected": <session id>}', 422)
    try:
        chosen, rejected = (server.store.owned(i, client.name) for i in ids)  # type: ignore[arg-type]
        server.store.prefer(chosen, rejected)
    except Refused as err:
        raise _refusal(err) from None
    return finite_json({"chosen": chosen.id, "rejected": rejected.id})


async def _status(request: Request) -> Response:
    _client(request)
    server = _server(request)
    return finite_json({"policy_version": server.policy_version, **server.store.status()})


async def _learning(request: Request) -> Response:
    client = _client(request)
    if not client.admin:
        raise Refusal(f"client {client.name!r}: not an admin; only an admin key switches learning", 403)
    body = await _body(request, '{"enabled": true|false}')
    if set(body) != {"enabled"} or not isinstance(body["enabled"], bool):
        raise Refusal('body: want {"enabled": true|false}', 422)
    _server(request).store.set_learning(body["enabled"])
    return finite_json({"learning": body["enabled"]})
