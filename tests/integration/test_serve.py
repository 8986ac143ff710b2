"""`turnrl serve` + ServerEngine end to end: real servers on localhost, tiny-random on CPU fp32.

Two servers start once for the module: A is never changed, B takes new weights (a test that
needs B's start weights loads them first, so test order does not matter). The test process builds the same tiny-random model (seed 0) and checks what the servers return
against it: ids verbatim, log-probs equal to a plain forward's, greedy outputs equal to the
in-process engine's.
"""

from __future__ import annotations

import copy
import dataclasses
import socket
from functools import partialmethod
from pathlib import Path

import httpx
import pytest
import torch

from tests.support.serving import (
    CAPITAL,
    EQ,
    HEADERS,
    KEY,
    TIME,
    load_start_weights,
    recomputed,
    serve_process,
    version_of,
)
from turnrl.config.schema import RolloutConfig, ServerConfig
from turnrl.models.weights_dir import write_weights_dir
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine, eos_ids
from turnrl.rollout.server import ServerEngine, ServerError
from turnrl.servers.inference.launcher import ServeProcess, start_all
from turnrl.workers.engines import build_engine

CFG = ServerConfig(timeout_s=60, max_retries=1, startup_timeout_s=60, api_key=KEY)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    # one torch thread: a tiny model gains nothing from more, and two spinning pools on a busy CPU crawl;
    # weights may come from anywhere under this session's temporary directories (every tmp_path)
    procs = [serve_process(tmp_path_factory.getbasetemp()) for _ in range(2)]
    try:
        yield start_all(procs)  # both load at once
    finally:
        for p in procs:
            p.stop()


def engine_for(urls, tiny, **kw) -> ServerEngine:
    model, tok = tiny
    kw.setdefault("vocab_size", model.config.vocab_size)
    return ServerEngine(urls, CFG, eos_ids=eos_ids(model, tok), **kw)


def test_health_and_models(servers):
    health = httpx.get(servers[0].url + "/health", headers=HEADERS).json()
    assert health["connections"].pop("open") >= 1  # this request's own, and any kept alive
    assert health == {
        "status": "ok",
        "model": "tiny-random",
        "vocab_size": 49152,
        "policy_version": 0,
        "batches_run": 0,  # the first request to this server is still to come
        "requests_served": 0,
        "max_rows_in_a_batch": 0,
        "requests_dropped": 0,
        "requests_aborted": 0,
        "requests_waiting": 0,
        "requests_refused_busy": 0,
        "tool_calls_unparsed": 0,
        "max_model_len": 2048,
        "limits": {
            "max_rows_per_request": 1024,
            "max_tokens_per_request": 4194304,
            "max_body": 33554432,
            "max_waiting": 64,
        },
        "connections": {  # --max-connections, --header-timeout and what they refused
            "max_connections": 1024,
            "header_timeout_s": 10.0,
            "refused_connections": 0,
            "header_timeouts": 0,
        },
    }
    assert httpx.get(servers[0].url + "/health").status_code == 401  # the key is asked on every route
    card = httpx.get(servers[0].url + "/v1/models", headers=HEADERS).json()["data"][0]
    assert (card["id"], card["vocab_size"], card["max_model_len"]) == ("tiny-random", 49152, 2048)


def test_token_ids_out_verbatim_with_the_models_log_probs(servers, tiny):
    body = {
        "prompt": [EQ, TIME],
        "max_tokens": 8,
        "n": 2,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "seed": 5,
        "logprobs": 0,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
    }
    out = httpx.post(servers[0].url + "/v1/completions", json=body, timeout=60, headers=HEADERS).json()
    assert out["object"] == "text_completion" and out["policy_version"] == 0
    choices = out["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    # prompt-major, as vLLM: prompt i's samples are choices 2i, 2i+1
    assert [c["prompt_token_ids"] for c in choices] == [EQ, EQ, TIME, TIME]
    for c in choices:
        ids = c["token_ids"]
        assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in ids]
        expected = recomputed(tiny[0], c["prompt_token_ids"], ids, 0.7)
        got = torch.tensor(c["logprobs"]["token_logprobs"])
        assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()
    assert out["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in choices)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"prompt": "hello"}, 400, "text prompts are not accepted"),
        ({"prompt": [[1, 2], [3, 49152]]}, 400, "prompt[1][1]: 49152 is not a token id"),
        ({"prompt": [1, 2], "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": [1, 2], "temperature": "hot"}, 400, "temperature"),
        ({"prompt": [1, 2], "stream": True}, 400, "stream: not supported"),
        ({"prompt": [1, 2], "max_tokens": 4096}, 400, "max_model_len 2048"),
        ({"prompt": [1, 2], "model": "gpt-4"}, 404, "'gpt-4' is not served here"),
        ({"max_tokens": 3}, 400, "prompt"),
    ],
)
def test_bad_requests_get_one_line(servers, body, status, words):
    r = httpx.post(servers[0].url + "/v1/completions", json=body, timeout=30, headers=HEADERS)
    assert r.status_code == status and words in r.json()["detail"] and "\n" not in r.json()["detail"]
    assert httpx.get(servers[0].url + "/health", headers=HEADERS).status_code == 200


def test_per_row_budgets_and_stop_strings_match_the_in_process_engine(servers, tiny):
    """Two prompts x n=2 with four budgets (an agent turn) and stop strings, greedy: the server
    engine must give row for row what HFEngine gives in-process."""
    engine = engine_for([servers[0].url], tiny)
    try:
        params = SamplingParams(max_new_tokens=6, n=2, temperature=0.0, stop=[" = =", " time time time"])
        budgets = [1, 6, 2, 5]
        got = engine.generate([EQ, TIME], params, budgets)
        want = HFEngine(*tiny).generate([EQ, TIME], params, budgets)
        assert got.response_ids == want.response_ids == [[446], [446, 446], [655, 655], [655, 655, 655]]
        assert got.finish_reasons == want.finish_reasons == ["length", "stop", "length", "stop"]
        for a, b in zip(got.log_probs, want.log_probs, strict=True):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4)
        assert got.policy_version == 0
    finally:
        engine.close()


def test_two_servers_share_the_rows_and_keep_their_order(servers, tiny, tmp_path):
    version = load_start_weights(servers[1], tiny, tmp_path)
    engine = engine_for([servers[0].url, servers[1].url], tiny, rows_per_request=3)
    engine.offset[servers[1].url] = version  # B holds the start policy (the engine's 0) as `version`
    try:
        prompts = [EQ, TIME, CAPITAL, EQ[:3]]
        params = SamplingParams(max_new_tokens=5, n=3, temperature=1.0, seed=11)
        gen = engine.generate(prompts, params)
        assert len(gen.response_ids) == 12 and all(len(ids) <= 5 for ids in gen.response_ids)
        assert all(n > 0 for n in engine.completed.values()), engine.completed
        for row, (ids, lps) in enumerate(zip(gen.response_ids, gen.log_probs, strict=True)):
            # A,A,A,B,B,B,...: a row's log-probs are those of its own prompt's continuation
            expected = recomputed(tiny[0], prompts[row // 3], ids, 1.0)
            assert torch.allclose(torch.tensor(lps), expected, atol=1e-4), row
    finally:
        engine.close()


def test_weight_update_changes_what_is_sampled(servers, tiny, tmp_path):
    server = servers[1]
    new_model = copy.deepcopy(tiny[0])  # other weights, same shapes, still tied
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in new_model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    actor = {"state": tiny[0].state_dict()}  # what the actor holds; the test swaps it for new weights
    engine = engine_for(
        [server.url],
        tiny,
        weights=lambda: actor["state"],
        weights_dir=tmp_path,
        model_config=new_model.config,
    )
    try:
        # one request (one server, one budget) with this seed samples as the in-process engine does
        params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)
        engine.sync_weights(1)  # the start weights (tied embeddings: lm_head is not in the file)
        held = version_of(server)  # 1 on a fresh server; later if another test loaded weights first
        assert held == 1 + engine.offset[server.url]
        before = engine.generate([EQ, TIME], params)
        assert before.response_ids == HFEngine(*tiny).generate([EQ, TIME], params).response_ids
        actor["state"] = new_model.state_dict()
        engine.sync_weights(2)
        assert (tmp_path / "v2" / "model.safetensors").is_file() and (
            tmp_path / "v2" / "config.json"
        ).is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["v2"]  # v1 deleted once every server has v2
        assert version_of(server) == held + 1
        after = engine.generate([EQ, TIME], params)
        want = HFEngine(new_model, tiny[1]).generate([EQ, TIME], params)
        assert after.response_ids == want.response_ids != before.response_ids
        assert after.policy_version == 2
        for new, ref in zip(after.log_probs, want.log_probs, strict=True):
            assert torch.allclose(torch.tensor(new), torch.tensor(ref), atol=1e-4)

        # a directory that does not fit the served model: 400 naming the key, old weights and version kept
        state = dict(new_model.state_dict())
        state["model.norm.weight"] = torch.ones(7)
        bad = write_weights_dir(state, tmp_path / "bad")
        body = {"model_path": str(bad), "policy_version": held + 2}
        r = httpx.post(server.url + "/update_weights_from_disk", json=body, headers=HEADERS)
        assert r.status_code == 400 and "model.norm.weight has shape [7]" in r.json()["detail"]
        assert r.json()["policy_version"] == held + 1
        nope = {"model_path": str(tmp_path / "nope")}
        r = httpx.post(server.url + "/update_weights_from_disk", json=nope, headers=HEADERS)
        assert r.status_code == 400 and "not a directory" in r.json()["detail"]
        assert version_of(server) == held + 1
        assert engine.generate([EQ, TIME], params).response_ids == want.response_ids
    finally:
        engine.close()


def test_a_server_that_lags_behind_the_trainer_is_an_error(servers, tiny, tmp_path):
    server = servers[1]
    engine = engine_for([server.url], tiny, weights=tiny[0].state_dict, weights_dir=tmp_path)
    try:
        engine.sync_weights(5)
        assert engine.generate([EQ], SamplingParams(max_new_tokens=2)).policy_version == 5
        # someone else loads another version into it behind the trainer's back (the server's next:
        # the engine reads it as its 6)
        body = {"model_path": str(tmp_path / "v5"), "policy_version": version_of(server) + 1}
        assert (
            httpx.post(server.url + "/update_weights_from_disk", json=body, headers=HEADERS).status_code
            == 200
        )
        with pytest.raises(
            ServerError, match=rf"{server.url} reports policy version 6, but the trainer is at version 5"
        ):
            engine.generate([EQ], SamplingParams(max_new_tokens=2))
    finally:
        engine.close()


def test_a_version_synced_again_loads_as_the_servers_next(servers, tiny, tmp_path):
    """turnrl serve takes only newer versions; a trainer that syncs a version the server holds
    (an evaluation's 0, a resume) has it loaded as the server's next one, and reads it back as its own."""
    server = servers[1]
    held = version_of(server)
    engine = engine_for([server.url], tiny, weights=tiny[0].state_dict, weights_dir=tmp_path)
    try:
        engine.sync_weights(0)  # refused with a 409 as version 0, loaded as held + 1
        assert version_of(server) == held + 1 and engine.offset[server.url] == held + 1
        assert engine.generate([EQ], SamplingParams(max_new_tokens=2)).policy_version == 0
        engine.sync_weights(1)
        assert version_of(server) == held + 2
        assert engine.generate([EQ], SamplingParams(max_new_tokens=2)).policy_version == 1
    finally:
        engine.close()


def test_vocab_or_model_mismatch_names_both(servers, tiny):
    url = servers[0].url
    with pytest.raises(
        ServerError, match=rf"{url} serves tiny-random with vocab size 49152, .* vocab size 1000"
    ):
        engine_for([url], tiny, vocab_size=1000)
    with pytest.raises(
        ServerError, match=rf"{url} serves model 'tiny-random', but the trainer's model is 'qwen'"
    ):
        engine_for([url], tiny, model_name="qwen")


def test_an_unreachable_server_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
    cfg = ServerConfig(startup_timeout_s=0.5)
    with pytest.raises(ServerError, match=rf"inference server {url} did not answer {url}/health within"):
        ServerEngine([url], cfg, eos_ids={2}, vocab_size=49152)


@pytest.mark.slow  # ~15-50 s: the default run stays under 10 minutes on 2 cores
def test_build_engine_runs_a_child_server_and_survives_losing_one(servers, tiny, tmp_path: Path, monkeypatch):
    model, tok = tiny
    assert isinstance(build_engine(RolloutConfig(), model, tok, tmp_path, "tiny-random"), HFEngine)
    rollout = RolloutConfig(engine="server", server=dataclasses.replace(CFG, api_key="not the child's"))
    # the child gets this module's key instead of a random one, so that one client (`other`, below)
    # can use it and servers[0] together; the engine sends the child's key, not `rollout.server.api_key`
    monkeypatch.setattr(ServeProcess, "__init__", partialmethod(ServeProcess.__init__, api_key=KEY))
    engine = build_engine(rollout, model, tok, tmp_path, "tiny-random", model.state_dict, dtype="float32")
    other = None
    try:
        child = engine.child
        child_url = child.url
        assert (tmp_path / "rollout_server.log").is_file()
        # the child loads only from the run's weights directory
        assert child.weights_root == str(tmp_path / "rollout_weights")
        params = SamplingParams(max_new_tokens=4, temperature=0.0)
        assert engine.generate([EQ], params).response_ids == [[446] * 4]
        engine.sync_weights(1)
        assert (tmp_path / "rollout_weights" / "v1" / "model.safetensors").is_file()

        # two servers, one dies: its requests are retried on the other (servers[0] is at version 0)
        other = engine_for([child_url, servers[0].url], tiny, rows_per_request=1)
        child.stop()
        gen = other.generate([EQ, TIME, CAPITAL], params)
        assert gen.response_ids[0] == [446] * 4 and gen.policy_version == 0
        # the engine's own child, gone: started again on its URL with the synced version 1, not lost
        again = engine.generate([EQ], params)
        assert engine.restarts == 1 and child.url == child_url and again.policy_version == 1
    finally:
        engine.close()
        if other is not None:
            other.close()
