"""`POST /api/v1/retrieve_future`: the result of a queued request, polled by the SDK.

An unfinished job is waited for up to `poll_wait_s`, then answered `{"type": "try_again"}` (the
SDK polls again at once, so the wait is what keeps it from spinning). A finished one is its
result: protobuf for `forward_backward` and `sample` (the only form this SDK reads for them), JSON
otherwise; a failed one `{"error", "category"}`, 'user' when the request caused it (a Refusal the
job raised: the SDK raises it without retrying), 'server' otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

from fastapi import APIRouter, Request
from starlette.responses import Response

from turnrl.servers.guard import finite_json
from turnrl.servers.inference.common import body_of
from turnrl.servers.refusal import Refusal
from turnrl.tinker.protobuf import PROTOBUF
from turnrl.tinker.service import service_of
from turnrl.tinker.wire import FutureRetrieveRequest

router = APIRouter()


def failure(err: BaseException) -> dict[str, str]:
    if isinstance(err, Refusal):
        return {"error": " ".join(str(err).split()), "category": "user"}
    return {
        "error": f"internal error: {type(err).__name__}: {' '.join(str(err).split())}",
        "category": "server",
    }


@router.post("/api/v1/retrieve_future")
async def retrieve_future(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, FutureRetrieveRequest, '{"request_id": "..."}')
    entry = service.futures.get(req.request_id)
    if not entry.future.done():
        # asyncio.wait, not wait_for: a wait that ends must not cancel the job (a cancelled wrapper
        # would cancel the future it wraps); its outcome is read when it comes, or asyncio would
        # log a failure that no poll happened to be waiting for as never retrieved
        waiting = asyncio.wrap_future(entry.future)
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())
        done, _ = await asyncio.wait({waiting}, timeout=service.limits.poll_wait_s)
        if not done:
            return finite_json({"type": "try_again", "request_id": req.request_id, "queue_state": "active"})
    service.futures.mark_read(entry)
    try:
        result = entry.future.result()
    except concurrent.futures.CancelledError:
        return finite_json(failure(RuntimeError("the server stopped before the request ran")))
    except Exception as err:
        return finite_json(failure(err))
    if isinstance(result, bytes):
        return Response(result, media_type=PROTOBUF)
    return finite_json(result)
