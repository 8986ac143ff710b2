"""What every turnrl server answers a request it will not serve, and how an app says so.

    raise Refusal("max_tokens: must be >= 1, got 0")        # 400, `{"detail": "<that line>"}`
    raise Refusal("n: ... rows exceed ... (--max-rows-per-request)", 413)

`Refusal` is the one error type of the servers' request checks (each server's `BadRequest` is it,
with that server's default status). `add_error_handlers(app)` turns it into its one-line JSON
`detail` and status, and any other exception into a one-line 500 (a fault of the server, never of
the client's input; the traceback stays in the server's log).
"""

from __future__ import annotations

from typing import Any

from turnrl.servers.guard import detail


class Refusal(ValueError):
    """A request a server will not serve: `status` and a one-line message naming the field."""

    default_status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = self.default_status if status is None else status

    @property
    def detail(self) -> str:
        return str(self)


def add_error_handlers(app: Any) -> None:
    """A `Refusal` is its one-line `detail` and status; anything else a one-line 500."""
    from starlette.requests import Request
    from starlette.responses import Response

    @app.exception_handler(Refusal)
    async def _refused(_request: Request, err: Refusal) -> Response:
        return detail(str(err), err.status)

    @app.exception_handler(Exception)
    async def _internal(_request: Request, err: Exception) -> Response:
        return detail(f"internal error: {type(err).__name__}: {' '.join(str(err).split())}", 500)
