"""`turnrl tinker serve`'s HTTP app: the routes the tinker SDK (0.38) calls, on one base model.

The routes live in one module per client of the SDK (`ROUTERS`): the session's, the training
client's, the sampling client's, the futures', the REST client's; each finds the state at
`app.state.tinker` (`service.TinkerService`). Every route sits behind `turnrl.servers.guard.Guard`
(the API key, which the SDK sends as `X-API-Key`, and the body size); a request the server will not
serve is a `Refusal`, a one-line `{"detail": ...}` 4xx naming the field (`add_error_handlers`); a
route this server does not implement is a one-line 404 naming it; a full queue (`service.Busy`) is
a one-line 503 with Retry-After, which the SDK retries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response

from turnrl.servers.guard import Guard, detail, finite_json
from turnrl.servers.listen import connection_health
from turnrl.servers.refusal import add_error_handlers
from turnrl.tinker.routes_futures import router as futures_router
from turnrl.tinker.routes_rest import router as rest_router
from turnrl.tinker.routes_sampling import router as sampling_router
from turnrl.tinker.routes_session import router as session_router
from turnrl.tinker.routes_training import router as training_router
from turnrl.tinker.service import Busy, TinkerService, service_of

DOCS = "docs/tinker.md"


def create_app(service: TinkerService, api_key: str = "") -> FastAPI:
    """The app over `service` (which it closes at shutdown). `api_key`: '' = none asked (loopback
    only: the CLI refuses otherwise)."""
    from turnrl import __version__

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            service.close()

    app = FastAPI(title="turnrl tinker serve", version=__version__, lifespan=lifespan)
    # outermost: the key and the body size are checked before routing and before any parsing
    app.add_middleware(Guard, api_key=api_key, max_body=service.limits.max_body)
    app.state.tinker = service
    add_error_handlers(app)

    @app.exception_handler(Busy)
    async def _busy(_request: Request, err: Busy) -> Response:
        return detail(str(err), err.status, {"Retry-After": "1"})

    @app.exception_handler(HTTPException)
    async def _not_served(request: Request, err: HTTPException) -> Response:
        if err.status_code in (404, 405):
            route = f"{request.method} {request.url.path}"
            return detail(
                f"route: {route} is not served by turnrl tinker serve (see {DOCS})", err.status_code
            )
        return detail(" ".join(str(err.detail).split()), err.status_code)

    for r in ROUTERS:
        app.include_router(r)
    return app


router = APIRouter()
# a new route is one module with an `APIRouter` and one line in this table
ROUTERS: list[APIRouter] = [
    router,
    session_router,
    training_router,
    sampling_router,
    futures_router,
    rest_router,
]


@router.get("/health")
async def health(request: Request) -> Response:
    service = service_of(request)
    registry = service.registry
    return finite_json(
        {
            "status": "ok",
            "connections": connection_health(request.app),
            "base_models": service.base_models,
            "training_clients": len(registry.models),
            "samplers": len(registry.samplers),
            "sessions": registry.live_sessions(),
            "futures": len(service.futures),
            "requests_waiting": service.waiting,
            "requests_refused_busy": service.refused_busy,
            "requests_dropped": service.dropped,
            "sample_requests": service.samples_answered,
            "sample_engine_calls": service.sample_calls,
            "state_root": str(service.root.root),
            "limits": {
                "max_training_clients": service.limits.max_training_clients,
                "max_samplers": service.limits.max_samplers,
                "max_futures": service.limits.max_futures,
                "max_waiting": service.limits.max_waiting,
                "max_sessions": service.limits.max_sessions,
                "session_timeout_s": service.limits.session_timeout_s,
                "max_body": service.limits.max_body,
                "max_num_samples": service.limits.sample.max_num_samples,
                "max_sample_tokens": service.limits.sample.max_tokens,
            },
        }
    )
