"""Async client for turnrl's sandbox server or a real SandboxFusion server (same JSON).

    async with SandboxClient("http://127.0.0.1:8080") as sandbox:
        result = await sandbox.run_code("print(1 + 1)", run_timeout=5)
        result.ok, result.stdout          # True, "2\\n"

Transient failures (connection errors, timeouts, 5xx including the server's 503 overload
answer) are retried with exponential backoff; a 4xx is the caller's mistake and raises
`SandboxRequestError` at once with the server's one-line reason (a missing or wrong API key
included: the key is sent as `Authorization: Bearer KEY`, from `api_key` or $TURNRL_API_KEY).

Sessions (turnrl's server only) keep a workspace across commands:

    async with sandbox.session(files={"src/x.py": code}, ttl_s=900) as s:
        result = await s.run("python src/x.py", timeout_s=30)   # CommandResult
        await s.write("/tests/test.sh", script)
        reward = await s.read("/logs/verifier/reward.txt")

A command is not idempotent, so `session_run` is resent only when the server cannot have started
it: the connection was never made, or the server answered 503 (overloaded) before running it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from turnrl.errors import TurnrlInputError
from turnrl.keys import API_KEY_ENV, auth_headers


class SandboxError(RuntimeError):
    """Base of the client's errors."""


class SandboxRequestError(SandboxError):
    """The server refused the request (4xx); retrying would not help."""


class SessionGone(SandboxRequestError):
    """The session does not exist on the server: it expired (its ttl_s ran out), was deleted, or
    was never created there; the server's reason says which."""


class SandboxUnavailable(SandboxError, TurnrlInputError):
    """The server could not be reached or kept failing after all retries.

    Also bad input (a TurnrlInputError): at start-up it means a sandbox URL that does not answer or a
    sandbox that cannot start, reported in one line naming the URL.
    """


def base_url(url: str) -> str:
    """Accept both the server root and a full `/run_code` URL (verl configs hold the latter)."""
    url = url.strip().rstrip("/")
    for suffix in ("/run_code", "/health", "/v1/ping"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"sandbox url must start with http:// or https://, got {url!r}")
    return url


@dataclass
class RunResult:
    """One `/run_code` answer, flattened."""

    status: str
    """Success | Failed | SandboxError."""
    run_status: str | None
    """Finished | Error | TimeLimitExceeded, or None when the program never ran."""
    stdout: str = ""
    stderr: str = ""
    return_code: int | None = None
    execution_time: float | None = None
    message: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    latency: float = 0.0
    """Seconds the client waited, queueing and retries included."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "Success"

    @property
    def timed_out(self) -> bool:
        return self.run_status == "TimeLimitExceeded"

    @classmethod
    def from_json(cls, data: dict[str, Any], latency: float = 0.0) -> RunResult:
        run = data.get("run_result") or {}
        files = {}
        for path, content in (data.get("files") or {}).items():
            try:
                files[path] = base64.b64decode(content or "")
            except ValueError:
                continue
        return cls(
            status=str(data.get("status", "SandboxError")),
            run_status=run.get("status"),
            stdout=run.get("stdout") or "",
            stderr=run.get("stderr") or "",
            return_code=run.get("return_code"),
            execution_time=run.get("execution_time"),
            message=data.get("message") or "",
            files=files,
            latency=latency,
            raw=data,
        )


@dataclass
class CommandResult:
    """One session command's answer."""

    return_code: int | None
    """Exit status (128 + N for death by signal N); None after a timeout or when it never ran."""
    stdout: str
    stderr: str
    timed_out: bool
    execution_time: float
    status: str = "Finished"
    """Finished (exited, any status) | TimeLimitExceeded | Error (the sandbox could not run it, or
    killed it because the session passed its disk, file or depth limits; `message` says which)."""
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "Finished" and self.return_code == 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommandResult:
        return cls(
            return_code=data.get("return_code"),
            stdout=data.get("stdout") or "",
            stderr=data.get("stderr") or "",
            timed_out=bool(data.get("timed_out")),
            execution_time=float(data.get("execution_time") or 0.0),
            status=str(data.get("status") or "Error"),
            message=data.get("message") or "",
        )


# a request failing with these was never sent whole: resending cannot run a command twice
UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300].strip() or response.reason_phrase
    if isinstance(body, dict):
        detail = body.get("detail") or body.get("message") or body
        return detail if isinstance(detail, str) else str(detail)[:300]
    return str(body)[:300]


def _encode(content: bytes | str) -> str:
    return base64.b64encode(content.encode() if isinstance(content, str) else content).decode("ascii")


class SandboxClient:
    """Calls `/run_code`; one instance may serve many concurrent coroutines."""

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        api_key: str | None = None,
    ) -> None:
        """timeout: seconds an HTTP attempt may take beyond the run's own `run_timeout` (time
        in the server's queue counts here); retries: extra attempts after the first on
        transient failures; api_key: the server's key (None or '' = $TURNRL_API_KEY, if set)."""
        self.url = base_url(url)
        self.headers = auth_headers(api_key)
        self.timeout, self.retries = timeout, retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=10.0), limits=limits, headers=self.headers
            )
        return self._http

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            after = response.headers.get("retry-after", "")
            if after.replace(".", "", 1).isdigit():
                return min(float(after), self.max_backoff)
        base = min(self.backoff * 2**attempt, self.max_backoff)
        return base * (0.5 + random.random() / 2)  # jitter spreads a burst of retries

    async def _request(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None = None,
        extra_time: float = 0.0,
        params: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> httpx.Response:
        """The answer (< 400) to one request, retried on transient failures; a request that is not
        `idempotent` only where it cannot have been acted on (UNSENT, or a 503)."""
        last = ""
        timeout = httpx.Timeout(self.timeout + extra_time, connect=10.0)
        for attempt in range(self.retries + 1):
            response = None
            retry = True
            try:
                response = await self._client().request(
                    method, self.url + path, json=payload, params=params, timeout=timeout
                )
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}".rstrip(": ")
                retry = idempotent or isinstance(err, UNSENT)
            else:
                if response.status_code < 400:
                    return response
                if response.status_code < 500:
                    error = SessionGone if response.status_code in (404, 410) and "session" in path else None
                    raise (error or SandboxRequestError)(
                        f"sandbox at {self.url} refused {path} ({response.status_code}): {_detail(response)}"
                    )
                last = f"HTTP {response.status_code}: {_detail(response)}"
                retry = idempotent or response.status_code == 503
            if not retry:
                raise SandboxUnavailable(
                    f"sandbox at {self.url} failed {path} ({last}); not resent: the command may have run"
                )
            if attempt < self.retries:
                await asyncio.sleep(self._delay(attempt, response))
        raise SandboxUnavailable(
            f"sandbox at {self.url} failed {path} after {self.retries + 1} attempts: {last}"
        )

    async def run_code(
        self,
        code: str,
        language: str = "python",
        stdin: str = "",
        run_timeout: float = 10.0,
        files: dict[str, bytes | str] | None = None,
        fetch_files: list[str] | None = None,
        memory_limit_MB: int = -1,
        compile_timeout: float = 10.0,
    ) -> RunResult:
        payload = {
            "code": code,
            "language": language,
            "stdin": stdin,
            "run_timeout": run_timeout,
            "compile_timeout": compile_timeout,
            "memory_limit_MB": memory_limit_MB,
            "files": {path: _encode(content) for path, content in (files or {}).items()},
            "fetch_files": list(fetch_files or []),
        }
        start = asyncio.get_running_loop().time()
        response = await self._request("POST", "/run_code", payload, extra_time=run_timeout)
        try:
            data = response.json()
        except ValueError as err:
            raise SandboxError(f"sandbox at {self.url} answered /run_code with non-JSON: {err}") from None
        return RunResult.from_json(data, asyncio.get_running_loop().time() - start)

    # ---- sessions ----

    async def create_session(
        self, files: Mapping[str, bytes | str] | None = None, ttl_s: float | None = None
    ) -> str:
        """A new session holding `files` (paths under /app, /tests, /logs, or relative to /app);
        its id. It and its files are removed after `ttl_s` (None: the server's default)."""
        payload: dict[str, Any] = {"files": {p: _encode(c) for p, c in (files or {}).items()}}
        if ttl_s is not None:
            payload["ttl_s"] = ttl_s
        response = await self._request("POST", "/sessions", payload)
        return str(response.json()["session_id"])

    async def session_run(
        self, session_id: str, command: str, timeout_s: float = 30.0, stdin: str = ""
    ) -> CommandResult:
        """Run `bash -c command` in the session's workspace (/app)."""
        payload = {"command": command, "timeout_s": timeout_s, "stdin": stdin}
        path = f"/sessions/{session_id}/run"
        response = await self._request("POST", path, payload, extra_time=timeout_s, idempotent=False)
        return CommandResult.from_json(response.json())

    async def read_file(self, session_id: str, path: str) -> bytes:
        response = await self._request("GET", f"/sessions/{session_id}/files", params={"path": path})
        return base64.b64decode(response.json()["content"])

    async def write_file(self, session_id: str, path: str, data: bytes | str) -> None:
        payload = {"content": _encode(data)}
        await self._request("PUT", f"/sessions/{session_id}/files", payload, params={"path": path})

    async def delete_session(self, session_id: str) -> None:
        """Remove the session and its files; one already removed (expired, deleted, or unknown
        to the server, say after its restart) is fine."""
        with contextlib.suppress(SessionGone):
            await self._request("DELETE", f"/sessions/{session_id}")

    def session(
        self, files: Mapping[str, bytes | str] | None = None, ttl_s: float | None = None
    ) -> SandboxSession:
        """`async with client.session(...) as s:` a session, deleted on exit."""
        return SandboxSession(self, files, ttl_s)

    async def health(self) -> dict[str, Any]:
        """turnrl's /health; for a SandboxFusion server (no /health), its /v1/ping."""
        try:
            return (await self._request("GET", "/health")).json()
        except SandboxRequestError:
            response = await self._request("GET", "/v1/ping")
            return {"status": "ok", "ping": response.text.strip()}


def check_server(url: str, timeout: float = 5.0, api_key: str | None = None) -> dict[str, Any]:
    """Fail fast, with one line naming the URL, when the sandbox is down or refuses the key
    (`api_key`, else $TURNRL_API_KEY) at training start-up."""
    root = base_url(url)
    try:
        with httpx.Client(timeout=timeout, headers=auth_headers(api_key)) as http:
            response = http.get(root + "/health")
            if response.status_code == 404:  # a SandboxFusion server
                response = http.get(root + "/v1/ping")
                if response.status_code < 400:
                    return {"status": "ok", "ping": response.text.strip()}
            if response.status_code < 400:
                return response.json()
    except (httpx.HTTPError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SandboxUnavailable(f"sandbox server at {root} is not usable: {reason}") from None
    # the server's own one-line reason: a refused key says which (missing or wrong)
    reason = f"HTTP {response.status_code}: {' '.join(_detail(response).split())}"
    if response.status_code == 401:
        raise SandboxUnavailable(
            f"sandbox server at {root} refused the key ({reason}); send its key (api_key or ${API_KEY_ENV})"
        )
    raise SandboxUnavailable(f"sandbox server at {root} is not usable: {reason}")


class SandboxSession:
    """One session of a `SandboxClient`, made on `__aenter__` and deleted on `__aexit__`."""

    def __init__(
        self,
        client: SandboxClient,
        files: Mapping[str, bytes | str] | None = None,
        ttl_s: float | None = None,
    ) -> None:
        self.client, self.files, self.ttl_s = client, files, ttl_s
        self.id = ""

    async def __aenter__(self) -> SandboxSession:
        self.id = await self.client.create_session(self.files, self.ttl_s)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()

    async def run(self, command: str, timeout_s: float = 30.0, stdin: str = "") -> CommandResult:
        return await self.client.session_run(self.id, command, timeout_s, stdin)

    async def read(self, path: str) -> bytes:
        return await self.client.read_file(self.id, path)

    async def write(self, path: str, data: bytes | str) -> None:
        await self.client.write_file(self.id, path, data)

    async def delete(self) -> None:
        """Delete it now; errors are left to the session's ttl_s (the server removes it then)."""
        if self.id:
            with contextlib.suppress(SandboxError):
                await self.client.delete_session(self.id)
