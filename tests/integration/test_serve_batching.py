"""`turnrl serve`'s dynamic batching: concurrent small requests share engine calls, seeded ones never.

The first tests drive `Batcher` with a fake engine that blocks until told, so what is merged is
deterministic. The rest run one real `turnrl serve` (tiny-random, CPU fp32) for the module and
check what concurrent clients get against a plain forward of the same model, as test_serve.py does.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from tests.support.serving import (
    CAPITAL,
    EQ,
    HEADERS,
    TIME,
    load_start_weights,
    recomputed,
    serve_process,
    version_of,
)
from turnrl.models.weights_dir import write_weights_dir
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.inference.app import create_app
from turnrl.servers.inference.batcher import Batcher

# ---------------------------------------------------------------- the scheduler, with a fake engine


@dataclass
class FakeEngine:
    """Answers row r of a call with [first prompt id of its prompt] * its budget; blocks each call
    until `gate` is set, so the test can queue requests while a batch 'runs'."""

    gate: threading.Event = field(default_factory=threading.Event)
    started: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    calls: list[tuple[list[list[int]], SamplingParams, list[int] | None]] = field(default_factory=list)
    fail: bool = False

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
        abort: Any = None,
    ) -> Generation:
        self.calls.append((prompt_ids, params, max_new_tokens_per_row))
        self.started.release()
        assert self.gate.wait(10)
        if self.fail:
            raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
        rows = [p for p in prompt_ids for _ in range(params.n)]
        budgets = max_new_tokens_per_row or [params.max_new_tokens] * len(rows)
        ids = [[p[0]] * k for p, k in zip(rows, budgets, strict=True)]
        return Generation(ids, [[-1.0] * len(r) for r in ids], ["length"] * len(ids), policy_version=7)


def busy_batcher(**kw: Any) -> tuple[FakeEngine, Batcher]:
    """A batcher whose engine is inside a first call (prompt [0]) until `engine.gate` is set."""
    engine = FakeEngine()
    batcher = Batcher(engine, **kw)
    batcher.submit([[0]], SamplingParams(max_new_tokens=1, seed=0))
    assert engine.started.acquire(timeout=5)
    return engine, batcher


def test_waiting_requests_merge_by_sampling_params_and_seeded_ones_run_alone():
    engine, batcher = busy_batcher(batch_wait_s=0.0)
    p = SamplingParams(max_new_tokens=4, temperature=0.7)
    a = batcher.submit([[1]], p)
    seeded = batcher.submit([[2]], SamplingParams(max_new_tokens=4, temperature=0.7, seed=3))
    b = batcher.submit([[3], [4]], SamplingParams(max_new_tokens=2, temperature=0.7))
    other = batcher.submit([[5]], SamplingParams(max_new_tokens=4, temperature=1.0))
    c = batcher.submit([[6]], SamplingParams(max_new_tokens=3, temperature=0.7, seed=3))  # seeded
    engine.gate.set()
    assert a.result(5).response_ids == [[1] * 4]
    assert b.result(5).response_ids == [[3, 3], [4, 4]]  # its own rows and budget, cut from the merged call
    assert seeded.result(5).response_ids == [[2] * 4] and c.result(5).response_ids == [[6] * 3]
    assert other.result(5).response_ids == [[5] * 4] and a.result().policy_version == 7
    # the first call, a+b merged (per-row budgets), the seeded ones alone and unchanged, then temperature 1
    assert [(prompts, budgets) for prompts, _, budgets in engine.calls] == [
        ([[0]], None),
        ([[1], [3], [4]], [4, 2, 2]),
        ([[2]], None),
        ([[5]], None),
        ([[6]], None),
    ]
    assert engine.calls[1][1].max_new_tokens == 4 and engine.calls[2][1].seed == 3
    assert batcher.stats() == {
        "batches_run": 5,
        "requests_served": 6,
        "max_rows_in_a_batch": 3,
        "requests_dropped": 0,
        "requests_aborted": 0,
        "requests_waiting": 0,
        "requests_refused_busy": 0,
    }
    batcher.close(5)


def test_row_cap_errors_cancelled_clients_and_calls_first():
    engine, batcher = busy_batcher(max_batch_rows=3, batch_wait_s=0.0)
    p = SamplingParams(max_new_tokens=2, n=2)
    first, gone, second, third = (batcher.submit([[i]], p) for i in (1, 2, 3, 4))
    assert gone.cancel()  # its client left before its batch started: never run
    load = batcher.call(lambda: len(engine.calls))  # stands in for a weight load
    engine.gate.set()
    assert load.result(5) == 1  # it ran right after the running call, before any waiting request
    assert [r.result(5).response_ids for r in (first, second, third)] == [
        [[1, 1]] * 2,
        [[3, 3]] * 2,
        [[4, 4]] * 2,
    ]
    # 2 rows + 2 rows > 3: one request per call
    assert [prompts for prompts, _, _ in engine.calls] == [[[0]], [[1]], [[3]], [[4]]]

    # an engine error fails every request of that merged batch; the next batch runs
    engine.gate.clear()
    engine.fail = True
    blocker = batcher.submit([[9]], SamplingParams(max_new_tokens=1))
    assert engine.started.acquire(timeout=5)
    failing = [batcher.submit([[i]], SamplingParams(max_new_tokens=1)) for i in (1, 2)]
    engine.gate.set()
    for r in (blocker, *failing):
        with pytest.raises(RuntimeError, match="out of memory"):
            r.result(5)
    engine.fail = False
    assert batcher.submit([[8]], SamplingParams(max_new_tokens=1)).result(5).response_ids == [[8]]
    batcher.close(5)


def test_a_lone_request_waits_for_company():
    engine = FakeEngine()
    engine.gate.set()
    batcher = Batcher(engine, batch_wait_s=0.3)
    p = SamplingParams(max_new_tokens=1)
    a = batcher.submit([[1]], p)
    b = batcher.submit([[2]], p)  # arrives within a's wait: they meet
    assert a.result(5).response_ids == [[1]] and b.result(5).response_ids == [[2]]
    assert [prompts for prompts, _, _ in engine.calls] == [[[1], [2]]]
    batcher.close(5)


def test_a_failed_batch_is_a_one_line_500_for_each_of_its_requests(tiny, monkeypatch):
    engine = HFEngine(*tiny)
    real = engine.generate

    def out_of_memory_once(*args: Any, **kw: Any) -> Generation:
        monkeypatch.setattr(engine, "generate", real)
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    monkeypatch.setattr(engine, "generate", out_of_memory_once)
    app = create_app(engine, "tiny-random", 2048, batch_wait_ms=300)  # the two requests meet
    try:
        with TestClient(app) as client:
            body = {"prompt": EQ, "max_tokens": 2}
            with ThreadPoolExecutor(2) as pool:
                failed = list(pool.map(lambda _: client.post("/v1/completions", json=body), range(2)))
            for r in failed:
                assert r.status_code == 500
                assert r.json()["detail"] == (
                    "generation failed: RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
                )
            assert client.post("/v1/completions", json=body).status_code == 200
            health = client.get("/health").json()
            assert (health["batches_run"], health["requests_served"], health["max_rows_in_a_batch"]) == (
                2,
                1,
                2,
            )
    finally:
        app.state.server.batcher.close(5)


# ---------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = serve_process(tmp_path_factory.getbasetemp())
    try:
        yield proc.start()
    finally:
        proc.stop()


def complete(url: str, prompt: list[int], **kw: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "logprobs": 0, "return_token_ids": True, **kw}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60, headers=HEADERS)
    assert r.status_code == 200, r.text
    return r.json()


def concurrently(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send every body at once from its own thread; the answers in the same order."""
    start = threading.Barrier(len(bodies))

    def send(body: dict[str, Any]) -> dict[str, Any]:
        start.wait()
        return complete(url, **body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


def counters(url: str) -> dict[str, Any]:
    return httpx.get(url + "/health", headers=HEADERS).json()


def check_choices(model: Any, eos: set[int], body: dict[str, Any], out: dict[str, Any], temperature: float):
    choices = out["choices"]
    assert len(choices) == body.get("n", 1)
    for c in choices:
        ids = c["token_ids"]
        assert c["prompt_token_ids"] == body["prompt"]
        # max_tokens honoured: the full budget, or fewer ending at EOS
        if c["finish_reason"] == "length":
            assert len(ids) == body["max_tokens"]
        else:
            assert len(ids) <= body["max_tokens"] and ids[-1] in eos
        expected = recomputed(model, body["prompt"], ids, temperature)
        got = torch.tensor(c["logprobs"]["token_logprobs"])
        assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()


def test_concurrent_requests_share_engine_calls(server, tiny):
    before = counters(server.url)
    prompts = [EQ, TIME, CAPITAL, EQ[:2], TIME[1:]]
    bodies = [
        {"prompt": prompts[i % 5], "max_tokens": 1 + i % 6, "n": 1 + i % 2, "temperature": 0.8}
        for i in range(16)
    ]
    version = before["policy_version"]
    outs = concurrently(server.url, bodies)
    after = counters(server.url)
    served, batches = (after[k] - before[k] for k in ("requests_served", "batches_run"))
    assert served == 16 and batches < 16, (served, batches)
    assert after["max_rows_in_a_batch"] > 2  # more than one request's rows in one call
    eos = HFEngine(*tiny).eos_ids
    for body, out in zip(bodies, outs, strict=True):
        assert out["policy_version"] == version
        check_choices(tiny[0], eos, body, out, 0.8)


def test_seeded_requests_are_never_merged(server, tiny):
    seeded = {"prompt": TIME, "max_tokens": 6, "temperature": 1.0, "seed": 7}
    alone = complete(server.url, **seeded)["choices"][0]["token_ids"]
    # the same ids as the in-process engine gives for this one seeded prompt
    want = HFEngine(*tiny).generate([TIME], SamplingParams(max_new_tokens=6, seed=7)).response_ids
    assert [alone] == want
    unseeded = {k: v for k, v in seeded.items() if k != "seed"}  # would merge, but for the seed
    outs = concurrently(server.url, [unseeded] * 4 + [seeded] + [unseeded] * 4)
    assert outs[4]["choices"][0]["token_ids"] == alone
    assert all(len(out["choices"]) == 1 for out in outs)


def test_weight_update_lands_between_batches(server, tiny, tmp_path: Path):
    new_model = copy.deepcopy(tiny[0])
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in new_model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    path = write_weights_dir(new_model.state_dict(), tmp_path / "v1")
    old = version_of(server)  # 0, unless another test loaded weights first
    new = old + 1
    models = {old: tiny[0], new: new_model}
    bodies = [{"prompt": [EQ, TIME, CAPITAL][i % 3], "max_tokens": 8, "temperature": 1.0} for i in range(12)]
    try:
        with ThreadPoolExecutor(len(bodies)) as pool:
            running = [pool.submit(complete, server.url, **body) for body in bodies]
            r = httpx.post(
                server.url + "/update_weights_from_disk",
                json={"model_path": str(path), "policy_version": new},
                timeout=60,
                headers=HEADERS,
            )
            assert r.status_code == 200 and r.json()["policy_version"] == new
            later = concurrently(server.url, bodies[:4])  # sent after the load: their batches use it
            during = [f.result() for f in running]  # no request fails (complete() checks the 200)
        assert {out["policy_version"] for out in during} <= {old, new}
        assert all(out["policy_version"] == new for out in later)
        # each response's version is the one that sampled it: its log-probs are that model's
        eos = HFEngine(*tiny).eos_ids
        for body, out in zip(bodies + bodies[:4], during + later, strict=True):
            check_choices(models[out["policy_version"]], eos, body, out, 1.0)
    finally:
        load_start_weights(server, tiny, tmp_path)


def test_a_client_that_leaves_does_not_stop_the_server(server, tiny):
    body = {"prompt": [EQ, TIME] * 8, "max_tokens": 16}
    with pytest.raises(httpx.TimeoutException):  # gives up while its batch runs or waits
        httpx.post(server.url + "/v1/completions", json=body, timeout=0.05, headers=HEADERS)
    health = httpx.get(server.url + "/health", timeout=5, headers=HEADERS)  # answers while that batch runs
    assert health.status_code == 200
    ok = {"prompt": CAPITAL, "max_tokens": 3, "temperature": 1.0}
    check_choices(tiny[0], HFEngine(*tiny).eos_ids, ok, complete(server.url, **ok), 1.0)
