"""What every turnrl HTTP server puts in front of its routes: the API key and the body limit.

    app = FastAPI(...)
    app.add_middleware(Guard, api_key=key, max_body=16 << 20)   # outermost: runs before routing

`Guard` is plain ASGI, so it sees the request before FastAPI parses anything:
- **the key**: with `api_key` set, every request must carry `Authorization: Bearer <key>` (what the
  `openai` SDK sends) or `X-API-Key: <key>`; it is compared in constant time (`hmac.compare_digest`)
  and a missing or wrong key gets a 401 before the body is read.
- **the body limit**: a `Content-Length` above `max_body` gets a 413 at once; a body sent without
  one (chunked) is counted as it streams in and refused the moment it passes the limit, so a
  100 MB chunked body is never held whole. The accepted body is handed to the app in one piece.
- **the client's departure**: after the body, the app's `receive()` is the client's own, so a
  route can wait for `http.disconnect` (`wait_for_disconnect`) and stop work nobody will read.

`check_bind` refuses to serve beyond loopback without a key; `finite_json` refuses NaN and
infinities anywhere in a response (JSON has no spelling for them; clients would choke or get null).
Every refusal is `{"detail": "<culprit>: <reason>"}`, one line.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Iterable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnrl.keys import API_KEY_ENV, auth_headers, check_bind, resolve_api_key

__all__ = [
    "API_KEY_ENV",
    "Guard",
    "auth_headers",
    "check_bind",
    "detail",
    "finite_json",
    "non_finite_path",
    "presented_key",
    "resolve_api_key",
    "wait_for_disconnect",
]


def detail(message: str, status: int, headers: dict[str, str] | None = None) -> Response:
    """A one-line refusal in turnrl's shape, `{"detail": ...}`."""
    return Response(
        orjson.dumps({"detail": message}), status_code=status, media_type="application/json", headers=headers
    )


def presented_key(scope: Scope) -> bytes | None:
    """The key a request carries (`Authorization: Bearer <key>` or `X-Api-Key`), or None."""
    headers = dict(scope.get("headers") or [])
    auth = headers.get(b"authorization", b"")
    if auth[:7].lower() == b"bearer ":
        return auth[7:].strip()
    return headers.get(b"x-api-key")


class Guard:
    """ASGI middleware: the key, then the body limit; see the module docstring.

    `open_paths`: paths served without a key (none by default: /health tells where files live)."""

    def __init__(
        self, app: ASGIApp, api_key: str = "", max_body: int = 16 << 20, open_paths: Iterable[str] = ()
    ) -> None:
        if max_body < 1:
            raise ValueError(f"max_body must be >= 1, got {max_body}")
        self.app, self.key, self.max_body = app, api_key.encode(), max_body
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.key and scope.get("path") not in self.open_paths:
            presented = presented_key(scope)
            if presented is None:
                msg = (
                    "api key: missing; send 'Authorization: Bearer <key>' (the server was started with a key)"
                )
                await detail(msg, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
            if not hmac.compare_digest(presented, self.key):
                await detail("api key: wrong key", 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.strip().isdigit() and int(length) > self.max_body:
            await self._too_big(int(length), scope, receive, send)
            return
        body, more, size = [], True, 0
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body was complete: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._too_big(None, scope, receive, send)
                return
            body.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(b"".join(body), receive), send)

    async def _too_big(self, length: int | None, scope: Scope, receive: Receive, send: Send) -> None:
        sent = f"{length} bytes" if length is not None else "more bytes than that"
        msg = f"request body: {sent} exceeds the server limit of {self.max_body} bytes (--max-body)"
        # the rest of the body is not read: the connection closes after the answer
        await detail(msg, 413, {"Connection": "close"})(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the whole body once, then the client's own messages (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client of `request` has gone (its body already read by `Guard`)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def non_finite_path(value: Any, path: str = "") -> str | None:
    """Where in `value` (dicts, lists, numbers) the first NaN or infinity is, as `a.b[2]`; None if
    nowhere. A list of numbers is summed first: a finite sum clears it in one C loop."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "value")
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite_path(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)) and value:
        try:
            if math.isfinite(sum(value)):
                return None
        except (TypeError, OverflowError):
            pass  # not all numbers: look at each item
        for i, item in enumerate(value):
            found = non_finite_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


def finite_json(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """`content` as a JSON response, or a 500 naming where a NaN or infinity was (never sent as
    JSON that a strict parser refuses, or as null that a client would take for a value)."""
    where = non_finite_path(content)
    if where is not None:
        return detail(f"response: {where} is not a finite number; nothing was sent", 500)
    return Response(orjson.dumps(content), status_code=status, media_type="application/json", headers=headers)
