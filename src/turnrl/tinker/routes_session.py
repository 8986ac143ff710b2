"""The session routes: what the SDK asks before any work, and what it sends in the background.

POST /api/v1/client/config          feature flags (below): keep the protocol plain
POST /api/v1/client/dynamic_config  the flags the SDK refreshes; all off
POST /api/v1/create_session         -> {"session_id"}
POST /api/v1/session_heartbeat      every 10 s while a ServiceClient lives
POST /api/v1/sessions/{id}/finish   ServiceClient.close(): its queued work dropped, its adapters freed
POST /api/v1/telemetry              the SDK's telemetry, its envelope checked, then dropped
GET  /api/v1/healthz, /api/v1/get_server_capabilities (the served base model)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from turnrl.servers.guard import finite_json
from turnrl.servers.inference.common import body_of
from turnrl.tinker.service import TinkerService, service_of
from turnrl.tinker.wire import (
    ClientConfigRequest,
    CreateSessionRequest,
    FinishSessionRequest,
    SessionHeartbeatRequest,
    TelemetryRequest,
)

router = APIRouter()


def client_flags(service: TinkerService) -> dict[str, Any]:
    """The flags that make the SDK speak the plain protocol this server implements: its API key in
    `X-API-Key` on every request (no JWT exchange), uncompressed protobuf bodies, one poll of
    /api/v1/retrieve_future per future, a forward_backward batch's chunks sent one after another
    (so they arrive in order) and each small enough for the body limit, plain httpx."""
    return {
        "pjwt_auth_enabled": False,
        "credential_default_source": "api_key",
        "proto_compress_fwdbwd": False,
        "parallel_fwdbwd_chunks": False,
        "fwdbwd_max_chunk_len": 1024,
        "fwdbwd_max_chunk_bytes_count": service.limits.max_body // 4,
        "use_pyqwest_transport": False,
        "sample_use_retrieve_futures": False,
        "sample_join_sampling_session": False,
        "custom_loss_server_side": False,
        "sample_no_retries": False,
        # a CPU-bound sample may take minutes; the SDK's stuck detector would call that a hang
        "sample_enable_stuck_detection": False,
    }


@router.post("/api/v1/client/config")
async def client_config(request: Request) -> Response:
    await body_of(request, ClientConfigRequest, '{"sdk_version": "0.38.0"}')
    return finite_json(client_flags(service_of(request)))


@router.post("/api/v1/client/dynamic_config")
async def client_dynamic_config(request: Request) -> Response:
    await body_of(request, ClientConfigRequest, '{"sdk_version": "0.38.0"}')
    return finite_json({"refresh_interval_sec": 3600, "sample_cancel_enabled": False})


@router.post("/api/v1/create_session")
async def create_session(request: Request) -> Response:
    req = await body_of(request, CreateSessionRequest, '{"tags": [], "sdk_version": "0.38.0"}')
    session = service_of(request).registry.new_session(req.sdk_version)
    return finite_json({"type": "create_session", "session_id": session.session_id})


@router.post("/api/v1/session_heartbeat")
async def session_heartbeat(request: Request) -> Response:
    req = await body_of(request, SessionHeartbeatRequest, '{"session_id": "..."}')
    service_of(request).registry.session(req.session_id)  # 404 unknown, 410 finished
    return finite_json({"type": "session_heartbeat"})


@router.post("/api/v1/sessions/{session_id}/finish")
async def finish_session(session_id: str, request: Request) -> Response:
    service = service_of(request)
    await body_of(request, FinishSessionRequest, '{"reason": {"type": "success"}}')
    models, samplers = service.registry.finish_session(session_id)
    # the session's queued work is dropped when it comes up (it has ended); the adapters go after it
    await service.call(lambda: service.release(models, samplers), bounded=False)
    return finite_json({})


@router.post("/api/v1/telemetry")
async def telemetry(request: Request) -> Response:
    await body_of(request, TelemetryRequest, '{"events": [], "platform": "", "sdk_version": "0.38.0", "session_id": "", "process_uuid": ""}')  # fmt: skip
    return finite_json({"status": "accepted"})


@router.get("/api/v1/healthz")
async def healthz() -> Response:
    return finite_json({"status": "ok"})


@router.get("/api/v1/get_server_capabilities")
async def server_capabilities(request: Request) -> Response:
    backbone = service_of(request).backbone
    card = {
        "model_name": backbone.name,
        "max_context_length": backbone.max_context,
        "trainable": True,
        "sampleable": True,
    }
    return finite_json({"supported_models": [card]})
