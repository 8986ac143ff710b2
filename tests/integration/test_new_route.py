"""A new server route is one module with an `APIRouter` and one line in the server's `ROUTERS`:
a toy route added that way to `turnrl serve`'s app (the real `create_app` over the tiny-random
model), served by uvicorn on a localhost socket with the connection bounds `listen.serve_on` gives,
answers, sits behind the server's key, and has its `Refusal` turned into the one-line JSON detail."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import APIRouter, Request
from starlette.responses import Response

from tests.support.app_thread import serving_app
from tests.support.serving import HEADERS, KEY
from turnrl.rollout.hf import HFEngine
from turnrl.servers.guard import finite_json
from turnrl.servers.inference import app as inference_app
from turnrl.servers.refusal import Refusal

# ---------------------------------------------------------------- the toy route module

toy = APIRouter()


@toy.get("/v1/toy")
async def toy_info(request: Request) -> Response:
    server = request.app.state.server
    return finite_json({"model": server.model_id, "policy_version": server.policy_version})


@toy.get("/v1/toy/refused")
async def toy_refused(request: Request) -> Response:
    raise Refusal("toy: refused on purpose", 409)


# ---------------------------------------------------------------- turnrl serve's app, with the toy


@pytest.fixture(scope="module")
def url(tiny) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inference_app, "ROUTERS", [*inference_app.ROUTERS, toy])  # the one line
        app = inference_app.create_app(HFEngine(*tiny), "tiny-random", 2048, api_key=KEY)
    try:
        with serving_app(app) as served:
            yield served
    finally:
        app.state.server.batcher.close(5)


def test_the_toy_route_answers_from_the_server_state(url):
    r = httpx.get(url + "/v1/toy", headers=HEADERS, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"model": "tiny-random", "policy_version": 0}
    # the server's own routes are all still there
    assert httpx.get(url + "/health", headers=HEADERS, timeout=10).json()["model"] == "tiny-random"
    assert httpx.get(url + "/v1/models", headers=HEADERS, timeout=10).status_code == 200


def test_the_toy_route_sits_behind_the_key(url):
    missing = httpx.get(url + "/v1/toy", timeout=10)
    assert missing.status_code == 401 and missing.json()["detail"].startswith("api key: missing")
    wrong = httpx.get(url + "/v1/toy", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and wrong.json() == {"detail": "api key: wrong key"}


def test_a_refusal_in_the_toy_route_is_its_one_line_detail_and_status(url):
    r = httpx.get(url + "/v1/toy/refused", headers=HEADERS, timeout=10)
    assert r.status_code == 409
    assert r.json() == {"detail": "toy: refused on purpose"}


def test_the_table_is_put_back(url):
    assert toy not in inference_app.ROUTERS
