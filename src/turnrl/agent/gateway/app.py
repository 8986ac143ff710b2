"""The gateway's HTTP API: one base URL per episode, one route per dialect (`dialects.DIALECTS`).

    POST /episodes/{episode_id}/v1/chat/completions    OpenAI's chat completions, whole or streamed
    GET  /episodes/{episode_id}/v1/models              -> {"object": "list", "data": [{"id": model}]}

The agent's client has `base_url = .../episodes/<id>/v1` and the episode's own key, so every call
names its episode without the agent knowing, and no call reaches another episode (`episode_of`).
Each dialect reads its request and writes its answer and its errors in its own shape; what a call
does between the two is the same for all (`calls`: checks, the plan on the trajectory, the engine,
the recording, a client that leaves).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from turnrl.agent.gateway.calls import EventStream, Turn, answer_whole, check_model, error_response
from turnrl.agent.gateway.dialects import DIALECTS
from turnrl.agent.gateway.dialects.base import BadRequest, Dialect
from turnrl.agent.gateway.dialects.chat import DIALECT as CHAT
from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.servers.guard import Guard, finite_json, presented_key
from turnrl.servers.refusal import Refusal

__all__ = ["BadRequest", "create_app", "episode_of", "serve_call"]


def create_app(gateway: Gateway) -> FastAPI:
    """The gateway's app: a route per dialect (`DIALECTS`) and the models list over `app.state.gateway`."""
    app = FastAPI(title="turnrl agent gateway")
    # no server-wide key: each episode has its own (`episode_of`); loopback only
    app.add_middleware(Guard, max_body=gateway.max_body)
    app.state.gateway = gateway
    add_error_handlers(app)
    app.include_router(router)
    for dialect in DIALECTS:
        app.add_api_route(f"/episodes/{{episode_id}}/v1{dialect.path}", route(dialect), methods=["POST"])
    return app


def _dialect_of(request: Request) -> Dialect:
    """The dialect of the route that refused (set by the route; OpenAI's before it is known)."""
    return getattr(request.state, "dialect", CHAT)


def add_error_handlers(app: FastAPI) -> None:
    """A refusal in its route's dialect; anything else a one-line 500 in the same shape."""

    @app.exception_handler(Refusal)
    async def _refused(request: Request, err: Refusal) -> Response:
        return error_response(_dialect_of(request), str(err), err.status)

    @app.exception_handler(Exception)
    async def _internal(request: Request, err: Exception) -> Response:
        message = f"internal error: {type(err).__name__}: {' '.join(str(err).split())}"
        return error_response(_dialect_of(request), message, 500)


def episode_of(episode_id: str, request: Request) -> OpenEpisode:
    """The open episode whose key the request carries. Another episode's key gets the answer an
    unknown id gets, so a key tells nothing about the ids of other episodes."""
    gateway: Gateway = request.app.state.gateway
    presented = presented_key(request.scope)
    if presented is None:
        raise BadRequest("api key: missing; send 'Authorization: Bearer <key>' (the episode's key)", 401)
    episode = gateway.episode(episode_id)
    if episode is None or not hmac.compare_digest(presented, episode.key.encode()):
        raise BadRequest(
            f"episode {episode_id[:64]!r}: unknown to this key, or already ended (timed out?)", 404
        )
    return episode


def route(dialect: Dialect) -> Callable[[str, Request], Awaitable[Response]]:
    """The dialect's call route: its request read, the call answered whole or streamed."""

    async def call_route(episode_id: str, request: Request) -> Response:
        request.state.dialect = dialect
        episode = episode_of(episode_id, request)
        return await serve_call(dialect, request, request.app.state.gateway, episode, episode_id)

    call_route.__name__ = f"{dialect.name}_call"
    return call_route


async def serve_call(
    dialect: Dialect, request: Request, gateway: Gateway, episode: OpenEpisode, episode_id: str
) -> Response:
    """One call of an open episode in `dialect`: read, checked, answered whole or streamed, recorded."""
    call = dialect.parse(await request.body())
    if dialect.bind is not None:  # the call builds on an earlier answer of its episode
        call = dialect.bind(call, episode)
    check_model(gateway, call)
    turn = Turn(gateway, episode, call, episode_id)
    if call.stream:  # the stream takes the episode's lock itself, for as long as it runs
        return EventStream(dialect, turn)
    async with episode.lock:  # one call of an episode at a time: its trajectory grows call by call
        return await answer_whole(dialect, turn, request)


router = APIRouter()


@router.get("/episodes/{episode_id}/v1/models")
async def models(episode_id: str, request: Request) -> Response:
    episode_of(episode_id, request)
    model_id = request.app.state.gateway.model_id
    card = {"id": model_id, "object": "model", "created": 0, "owned_by": "turnrl"}
    # what Anthropic's SDK reads of a model: its type, display name, release date
    card |= {"type": "model", "display_name": model_id, "created_at": "1970-01-01T00:00:00Z"}
    return finite_json({"object": "list", "data": [card]})
