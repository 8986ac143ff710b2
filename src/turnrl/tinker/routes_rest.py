"""The REST route of a training run's checkpoints (`RestClient.list_checkpoints(run_id)`).

    GET /api/v1/training_runs/{run_id}/checkpoints  -> {"checkpoints": [...], "cursor": null}

A run is a training client's model id; its checkpoints outlive it (and the server), so a run is
known while its client lives or while it has a directory under the state root.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from turnrl.servers.guard import finite_json
from turnrl.servers.refusal import Refusal
from turnrl.tinker.service import service_of

router = APIRouter()


@router.get("/api/v1/training_runs/{run_id}/checkpoints")
async def list_checkpoints(run_id: str, request: Request) -> Response:
    service = service_of(request)
    if run_id not in service.registry.run_ids() and not service.root.run_known(run_id):
        raise Refusal(f"training_run_id: unknown run {run_id!r} (no live client and no checkpoints)", 404)
    return finite_json({"checkpoints": service.root.list(run_id), "cursor": None})
