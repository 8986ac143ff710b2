"""A careless or hostile client against `turnrl tinker serve` (tiny-random, CPU), in-process.

Every route gets malformed JSON, wrong types, huge numbers, deep nesting, unknown fields (answered
with "did you mean"), random and truncated protobuf, and loss inputs that do not fit their datum;
every answer must be a 4xx whose `detail` is one line, a request the server accepted must end in a
result or a one-line user error (never a server fault), and afterwards the server must answer a
fixed forward pass and a greedy sample exactly as before. Then the bounds: a full queue is a 503
with Retry-After; a client that leaves (its session closed, or silent past --session-timeout-s) has
its queued work dropped with a one-line error; sessions are capped.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

tinker = pytest.importorskip("tinker")
from fastapi.testclient import TestClient  # noqa: E402
from tinker import types  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from turnrl.models.loader import load_model, model_directory  # noqa: E402
from turnrl.tinker.app import create_app  # noqa: E402
from turnrl.tinker.backbone import Backbone  # noqa: E402
from turnrl.tinker.checkpoints import StateRoot  # noqa: E402
from turnrl.tinker.service import ServiceLimits, TinkerService  # noqa: E402

KEY = "tml-fuzz-key"
BASE = "tiny-random"
IDS = [504, 3575, 282, 4649, 314, 7042, 30, 216, 1232]
PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def tiny() -> tuple[torch.nn.Module, Any]:
    return load_model(BASE, torch.device("cpu"), seed=0)


@dataclass
class Server:
    client: TestClient
    service: TinkerService

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        if isinstance(body, bytes):
            return self.client.post(path, content=body, **kw)
        return self.client.post(path, json=body, **kw)

    def ok(self, path: str, body: Any) -> dict[str, Any]:
        r = self.post(path, body)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def outcome(self, request_id: str) -> Any:
        """The job's result (bytes for protobuf, else JSON) once it has one."""
        while True:
            r = self.post("/api/v1/retrieve_future", {"request_id": request_id})
            assert r.status_code == 200, r.text
            if r.headers["content-type"].startswith("application/x-protobuf"):
                return r.content
            body = r.json()
            if body.get("type") != "try_again":
                return body

    def session(self) -> str:
        return self.ok("/api/v1/create_session", {"tags": [], "sdk_version": "0.38.0"})["session_id"]

    def training_client(self, session: str, seq: int = 0) -> str:
        body = {"session_id": session, "model_seq_id": seq, "base_model": BASE, "lora_config": {"rank": 2, "seed": 0}}  # fmt: skip
        created = self.ok("/api/v1/create_model", body)
        assert self.outcome(created["request_id"])["model_id"] == created["model_id"]
        return created["model_id"]


@contextlib.contextmanager
def serve(tiny: tuple[torch.nn.Module, Any], root: Path, **limits: Any) -> Iterator[Server]:
    """A fresh service on a copy of the module's tiny-random (peft wraps the model it is given)."""
    model, tokenizer = tiny
    backbone = Backbone(copy.deepcopy(model), tokenizer, BASE, str(model_directory(BASE)))
    service = TinkerService(backbone, StateRoot(root), ServiceLimits(poll_wait_s=0.01, **limits))
    app = create_app(service, KEY)
    # server faults come back as responses (a 500 fails an assertion below), not as exceptions here
    with TestClient(app, raise_server_exceptions=False, headers={"X-API-Key": KEY}) as client:
        yield Server(client, service)


def refused(r: Any, *words: str) -> str:
    """A 4xx with a one-line `detail` holding `words`."""
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and detail, detail
    assert all(w in detail for w in words), detail
    return detail


# ---------------------------------------------------------------- the fuzzed server and its answers


def fb_body(model_id: str, data: list[types.Datum], loss_fn: str = "cross_entropy", forward_only: bool = False) -> bytes:  # fmt: skip
    """A forward_backward body as the SDK encodes it."""
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn="cross_entropy"),
        model_id=model_id,
        seq_id=1,
    )
    msg = forward_backward_request_to_proto(request)
    msg.loss_fn, msg.forward_only = loss_fn, forward_only
    return msg.SerializeToString()


def datum(ids: list[int] = IDS, **inputs: Any) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], **inputs},
    )


@dataclass
class Live:
    server: Server
    session: str
    model_id: str
    sampler: str
    reference: Any = None

    def greedy(self) -> dict[str, Any]:
        return {
            "sampling_session_id": self.sampler,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": IDS[:3]}]},
            "sampling_params": {"max_tokens": 3, "temperature": 0.0},
            "num_samples": 1,
        }

    def answer(self) -> Any:
        """A forward pass's log-probs and a greedy sample: what the fuzzing must leave unchanged."""
        r = self.server.post("/api/v1/forward_backward", fb_body(self.model_id, [datum()], forward_only=True), headers=PB)  # fmt: skip
        assert r.status_code == 200, r.text
        fwd = deserialize_forward_backward_output(self.server.outcome(r.json()["request_id"]))
        sample = self.server.ok("/api/v1/asample", self.greedy())
        seqs = deserialize_sample_response(self.server.outcome(sample["request_id"])).sequences
        return [o["logprobs"].to_numpy().tolist() for o in fwd.loss_fn_outputs], [(q.tokens, q.logprobs) for q in seqs]  # fmt: skip

    def unharmed(self) -> None:
        health = self.server.client.get("/health")
        assert health.status_code == 200 and health.json()["requests_waiting"] == 0, health.text
        assert self.answer() == self.reference


@pytest.fixture(scope="module")
def live(tiny, tmp_path_factory) -> Iterator[Live]:
    with serve(tiny, tmp_path_factory.mktemp("fuzz_state"), max_body=1 << 20) as server:
        session = server.session()
        model_id = server.training_client(session)
        snap = server.ok("/api/v1/save_weights_for_sampler", {"model_id": model_id, "sampling_session_seq_id": 0})  # fmt: skip
        sampler = server.outcome(snap["request_id"])["sampling_session_id"]
        state = Live(server, session, model_id, sampler)
        state.reference = state.answer()
        yield state


def json_routes(live: Live) -> dict[str, dict[str, Any]]:
    """A body every JSON route accepts (or answers with a 4xx of its own, as an unknown future)."""
    s, m = live.session, live.model_id
    return {
        "/api/v1/client/config": {"sdk_version": "0.38.0"},
        "/api/v1/client/dynamic_config": {"sdk_version": "0.38.0"},
        "/api/v1/create_session": {"tags": ["t"], "sdk_version": "0.38.0", "user_metadata": {"k": "v"}},
        "/api/v1/session_heartbeat": {"session_id": s},
        "/api/v1/create_model": {
            "session_id": s,
            "model_seq_id": 7,
            "base_model": BASE,
            "lora_config": {"rank": 2, "seed": 0, "train_mlp": True},
        },
        "/api/v1/get_info": {"model_id": m},
        "/api/v1/optim_step": {
            "model_id": m,
            "adam_params": {"learning_rate": 0.0, "beta1": 0.9},
            "seq_id": 1,
        },
        "/api/v1/save_weights": {"model_id": m, "path": "fuzz", "seq_id": 1, "overwrite": False},
        "/api/v1/load_weights": {"model_id": m, "path": f"tinker://{m}/weights/none", "optimizer": True},
        "/api/v1/save_weights_for_sampler": {"model_id": m, "path": "fuzz", "seq_id": 1},
        "/api/v1/create_sampling_session": {
            "session_id": s,
            "sampling_session_seq_id": 9,
            "base_model": BASE,
        },
        "/api/v1/asample": live.greedy(),
        "/api/v1/retrieve_future": {"request_id": "nope"},
        "/api/v1/telemetry": {
            "events": [],
            "platform": "linux",
            "sdk_version": "0.38.0",
            "session_id": s,
            "process_uuid": "u",
        },
        f"/api/v1/sessions/{s}/finish": {"reason": {"type": "success"}, "detail": "done"},
    }


FREE_FORM = ("user_metadata",)
"""Dicts whose values may be anything: changing one inside is no error."""
WRONG: dict[type, list[Any]] = {
    str: [17, [], {}, True],
    bool: ["maybe", 2, 1, "true", [], {}],
    int: ["seven", "7", True, 1.5, [], {}, 2**70, -(2**70)],
    float: ["hot", "0.5", True, [], {}],
    list: ["x", {}, 5],
    dict: ["x", [], 5],
}
"""Per JSON type, values that are not of it, none converted to it ("7" or true for an integer)."""
RAW = [
    "1" + "0" * 5000,
    "-" + "9" * 1000,
    "-1e400",
    "NaN",
    "[" * 3000 + "]" * 3000,
    '{"a":' * 3000 + "1" + "}" * 3000,
]
"""Raw JSON spliced in for a value: a huge integer, an infinite float, NaN, deep nesting."""
MALFORMED = [
    b"",
    b"   ",
    b'{"a": ',
    b"[1, 2]",
    b"null",
    b'"text"',
    b"123",
    b"\xff\xfe\x00",
    b'{"a": 1, "a": }',
    b"[" * 100_000,
    b'{"x": ' * 50_000,
]


def leaves(body: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every value in `body`, free-form dicts taken whole."""
    if path:
        yield path, body
    if isinstance(body, dict) and (not path or path[-1] not in FREE_FORM):
        for key, value in body.items():
            yield from leaves(value, (*path, key))
    elif isinstance(body, list):
        for i, value in enumerate(body):
            yield from leaves(value, (*path, i))


def replaced(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(body)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


def shown(path: tuple[Any, ...]) -> str:
    """A path as the refusals name it: `a.b[0].c`."""
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


# ---------------------------------------------------------------- JSON


def test_every_malformed_or_mistyped_json_body_is_a_one_line_4xx(live: Live):
    routes = json_routes(live)
    sent = 0
    for route, good in routes.items():
        for body in MALFORMED:
            refused(live.server.post(route, body))
        for path, value in leaves(good):
            for wrong in WRONG[type(value)]:
                refused(live.server.post(route, replaced(good, path, wrong)))
            for raw in RAW:
                text = json.dumps(replaced(good, path, "__RAW__")).replace('"__RAW__"', raw)
                refused(live.server.post(route, text.encode()))
            sent += len(WRONG[type(value)]) + len(RAW)
    assert sent > 400
    live.unharmed()


def test_unknown_fields_are_refused_with_a_did_you_mean_at_any_depth(live: Live):
    for route, good in json_routes(live).items():
        dicts = [((), good)] + [
            (p, v) for p, v in leaves(good) if isinstance(v, dict) and p[-1] not in FREE_FORM
        ]
        for path, value in dicts:
            for key in value:
                typo = (
                    replaced(good, (*path, key + "x"), value[key])
                    if path
                    else {**good, key + "x": value[key]}
                )
                detail = refused(live.server.post(route, typo), f"did you mean {key!r}?")
                assert detail.startswith(shown((*path, key + "x")) + ": unknown field"), detail
    # what the SDK names but this server does not do is named too, never ignored
    body = {**live.greedy(), "topk_prompt_logprobs": 2}
    refused(live.server.post("/api/v1/asample", body), "topk_prompt_logprobs: not supported")
    body = json_routes(live)["/api/v1/create_model"] | {"optimizer_config": {"type": "adamw", "lr": 1}}
    refused(live.server.post("/api/v1/create_model", body), "optimizer_config.lr: unknown field")
    live.unharmed()


def test_wrong_json_types_and_out_of_range_values_are_refused_naming_the_field(live: Live):
    routes = json_routes(live)
    model, sample, params = routes["/api/v1/create_model"], live.greedy(), live.greedy()["sampling_params"]
    vocab = live.server.service.backbone.vocab_size
    cases = [
        (
            "/api/v1/create_model",
            {**model, "lora_config": {"rank": True}},
            "lora_config.rank: Input should be a valid integer",
        ),
        (
            "/api/v1/load_weights",
            {**routes["/api/v1/load_weights"], "optimizer": "yes"},
            "optimizer: Input should be a valid boolean",
        ),
        ("/api/v1/asample", {**sample, "num_samples": "1"}, "num_samples: Input should be a valid integer"),
        *(
            (
                "/api/v1/asample",
                {**sample, "sampling_params": {**params, **bad}},
                f"sampling_params.{field}: Input should be a valid {kind}",
            )
            for bad, field, kind in (
                ({"max_tokens": "5"}, "max_tokens", "integer"),
                ({"max_tokens": True}, "max_tokens", "integer"),
                ({"max_tokens": 5.0}, "max_tokens", "integer"),
                ({"temperature": "0.5"}, "temperature", "number"),
                ({"seed": "7"}, "seed", "integer"),
            )
        ),
        *(
            (
                "/api/v1/asample",
                {**sample, "sampling_params": {**params, "stop": [5, t]}},
                f"sampling_params.stop: {t} is not a token id in [0, {vocab})",
            )
            for t in (10**12, -5, vocab)
        ),
        (
            "/api/v1/save_weights",
            {**routes["/api/v1/save_weights"], "ttl_seconds": -5},
            "ttl_seconds: Input should be greater than 0",
        ),
        (
            "/api/v1/save_weights_for_sampler",
            {**routes["/api/v1/save_weights_for_sampler"], "ttl_seconds": 0},
            "ttl_seconds: Input should be greater than 0",
        ),
    ]
    for route, body, line in cases:
        assert refused(live.server.post(route, body)) == line, (route, body)
    # NaN and infinity inside free-form metadata: JSON has neither, the checkpoint's tinker.json would not read back
    for route, body, line in (
        (
            "/api/v1/create_session",
            '{"sdk_version": "0.38.0", "user_metadata": {"k": NaN}}',
            "user_metadata: nan at ['k'] is not a finite number",
        ),
        (
            "/api/v1/create_session",
            '{"sdk_version": "0.38.0", "user_metadata": {"k": {"x": [1, -1e999]}}}',
            "user_metadata: -inf at ['k']['x'][1] is not a finite number",
        ),
        (
            "/api/v1/create_model",
            json.dumps(model | {"user_metadata": {"k": "__RAW__"}}).replace('"__RAW__"', "1e999"),
            "user_metadata: inf at ['k'] is not a finite number",
        ),
    ):
        assert refused(live.server.post(route, body.encode())) == line, body
    # what the SDK sends still passes: a JSON integer for a float, metadata of any finite JSON
    for extra in ({"temperature": 0, "top_p": 1}, {"stop": [5, vocab - 1]}):
        queued = live.server.ok("/api/v1/asample", {**sample, "sampling_params": {**params, **extra}})
        assert isinstance(live.server.outcome(queued["request_id"]), bytes)  # samples, not an error
    live.server.ok("/api/v1/create_session", {"sdk_version": "0.38.0", "user_metadata": {"k": [1, 2.5, None, {"x": "y"}]}})  # fmt: skip
    live.unharmed()


def test_bad_prompts_are_refused_naming_the_token(live: Live):
    cases = [
        ({"chunks": "x"}, "prompt.chunks: must be a list"),
        ({"chunks": [{"type": "image", "data": "x"}]}, "'image' chunks are not supported"),
        (
            {"chunks": [{"type": "encoded_text", "tokens": [1, -1]}]},
            "prompt.chunks[0].tokens: -1 is not a token id",
        ),
        ({"chunks": [{"type": "encoded_text", "tokens": [10**30]}]}, "is not a token id"),
        ({"chunks": [{"type": "encoded_text", "tokens": [1.5]}]}, "1.5 is not a token id"),
        ({"chunks": []}, "prompt: no tokens"),
    ]
    for prompt, words in cases:
        refused(live.server.post("/api/v1/asample", {**live.greedy(), "prompt": prompt}), words)
    big = {**live.greedy(), "sampling_params": {"max_tokens": 10**9}}
    refused(live.server.post("/api/v1/asample", big), "sampling_params.max_tokens")
    refused(live.server.post("/api/v1/asample", b"x" * ((1 << 20) + 1)), "--max-body")
    live.unharmed()


# ---------------------------------------------------------------- protobuf


def accepted_or_refused(live: Live, body: bytes) -> None:
    """A 4xx with one line, or a request that ends in a result or a one-line user error."""
    r = live.server.post("/api/v1/forward_backward", body, headers=PB)
    if r.status_code == 200:
        out = live.server.outcome(r.json()["request_id"])
        if isinstance(out, dict):
            assert out["category"] == "user" and "\n" not in out["error"], out
        return
    refused(r)


def test_random_truncated_and_flipped_protobuf_never_faults_the_server(live: Live):
    rng = random.Random(0)
    for _ in range(150):
        refused(
            live.server.post("/api/v1/forward_backward", rng.randbytes(rng.randrange(0, 400)), headers=PB)
        )
    good = fb_body(live.model_id, [datum(), datum(IDS[:5], weights=[1.0, 0.0, 1.0, 1.0])], forward_only=True)
    for cut in range(0, len(good), 3):  # a prefix may still parse: then it must be served or refused
        accepted_or_refused(live, good[:cut])
    for _ in range(60):
        flipped = bytearray(good)
        flipped[rng.randrange(len(good))] = rng.randrange(256)
        accepted_or_refused(live, bytes(flipped))
    live.unharmed()


def _tensor_cases(model_id: str) -> list[tuple[bytes, str]]:
    """forward_backward bodies whose tensors do not fit, each with the words of its refusal."""
    pb = live_pb()
    cases: list[tuple[bytes, str]] = []

    def edited(edit: Any, data: list[types.Datum] | None = None, loss: str = "cross_entropy") -> bytes:
        msg = pb.ForwardBackwardRequest()
        msg.ParseFromString(fb_body(model_id, data or [datum()], loss))
        edit(msg)
        return msg.SerializeToString()

    def targets(msg: Any) -> Any:
        return msg.data[0].loss_fn_inputs["target_tokens"]

    rl = datum(logprobs=[0.0] * 8, advantages=[1.0] * 8)
    three_targets = types.Datum(
        model_input=types.ModelInput.from_ints(IDS[:5]), loss_fn_inputs={"target_tokens": IDS[1:4]}
    )
    mask = types.TensorData.from_numpy(np.ones(8, np.float32))
    float_targets = pb.Tensor(dtype=pb.DTYPE_FLOAT32, dense=np.ones(8, np.float32).tobytes())

    def config(key: str, field: str, value: Any) -> Any:
        return lambda m: setattr(m.loss_fn_config_v2[key], field, value)

    cases += [
        (
            fb_body(model_id, [datum(IDS[:4]), three_targets]),
            "data[1].loss_fn_inputs.target_tokens: 3 targets for 5 input tokens",
        ),
        (fb_body(model_id, [datum(weights=[1.0, 2.0])]), "data[0].loss_fn_inputs.weights: shape [2]"),
        (fb_body(model_id, [datum(weights=[float("nan")] * 8)]), "holds NaN or infinity"),
        (fb_body(model_id, [datum([*IDS[:3], 49152])]), "49152 is not a token id"),
        (fb_body(model_id, [datum(mask=mask)]), "data[0].loss_fn_inputs.mask: unknown field"),
        (fb_body(model_id, [datum()], "ppo"), "ppo needs 'logprobs'"),
        (fb_body(model_id, [rl], "gspo"), "gspo needs 'weights'"),
        (fb_body(model_id, [rl], "dro"), "loss_fn_config.beta: required by dro"),
        (fb_body(model_id, [datum()], "stable_reinforce"), "'stable_reinforce' is not a loss of this server"),
        (fb_body(model_id, []), "data: no datums"),
        (fb_body("nobody:train:0", [datum()]), "unknown training client"),
        (edited(lambda m: targets(m).shape.extend([2, 2])), "shape"),
        (edited(lambda m: targets(m).shape.__setitem__(0, 2**40)), "at most"),
        (edited(lambda m: targets(m).shape.__setitem__(0, -8)), "shape [-8]"),
        (edited(lambda m: setattr(targets(m), "dense", targets(m).dense[:-3])), "malformed tensor bytes"),
        (edited(lambda m: setattr(targets(m), "dtype", 99)), "tensor dtype 99"),
        (edited(lambda m: targets(m).MergeFrom(float_targets)), "must be integer token ids"),
        (
            edited(lambda m: setattr(targets(m), "dtype", pb.DTYPE_INT32)),
            "16 values do not fill its shape [8]",
        ),
        (
            edited(lambda m: setattr(m.data[0].model_input[0].encoded_text, "tokens", b"\x01\x02\x03")),
            "token bytes are not int32s",
        ),
        (
            edited(config("clip_low_threshold", "number", 1.5), [rl], "ppo"),
            "0 <= clip_low_threshold <= 1 <= clip_high_threshold",
        ),
        (edited(config("temperature", "number", 0.5)), "loss_fn_config.temperature: unknown field"),
        (edited(config("clip_low_threshold", "text", "x"), [rl], "ppo"), "must be a finite number"),
    ]
    # sparse CSR targets whose indices do not fit their shape
    for crow, col in (([0, 1, 5], [0, 1]), ([0, 2, 1], [0, 1]), ([0, 1, 2], [0, 9]), ([0, 1, 2], [0, -1])):

        def sparse(m: Any, crow: list[int] = crow, col: list[int] = col) -> None:
            t = targets(m)
            t.shape[:] = [2, 2]
            t.sparse_csr.values = np.array([1, 2], np.int64).tobytes()
            t.sparse_csr.crow_indices = np.array(crow, np.int64).tobytes()
            t.sparse_csr.col_indices = np.array(col, np.int64).tobytes()

        cases.append((edited(sparse, data=[datum(IDS[:3])]), "sparse CSR indices do not match"))
    return cases


def live_pb() -> Any:
    from turnrl.tinker.protobuf import pb

    return pb()


def test_tensors_that_do_not_fit_their_datum_are_one_line_4xx(live: Live):
    for body, words in _tensor_cases(live.model_id):
        refused(live.server.post("/api/v1/forward_backward", body, headers=PB), words)
    # a loss that is infinite is refused without touching the gradients
    inf = fb_body(live.model_id, [datum(logprobs=[-40.0] * 8, advantages=[3e38] * 8)], "importance_sampling")
    r = live.server.post("/api/v1/forward_backward", inf, headers=PB)
    out = live.server.outcome(r.json()["request_id"])
    assert out["category"] == "user" and "nothing was applied" in out["error"], out
    live.unharmed()


# ---------------------------------------------------------------- other routes


def test_paths_keys_and_unknown_routes_are_one_line_4xx(live: Live):
    client = live.server.client
    for weird in ("..", "%2e%2e", "a" * 3000, "\u00e9\u00e9", f"{live.session}:sample:99", "x:train:0"):
        refused(client.get(f"/api/v1/samplers/{weird}"))
        refused(client.get(f"/api/v1/training_runs/{weird}/checkpoints"))
        refused(live.server.post(f"/api/v1/sessions/{weird}/finish", {"reason": {"type": "success"}}))
    refused(client.post("/api/v1/weights_info", json={}), "is not served by turnrl tinker serve")
    refused(client.get("/api/v1/create_model"), "route: GET /api/v1/create_model is not served")
    refused(client.get("/health", headers={"X-API-Key": "tml-wrong"}))
    for path, value in (
        ("/api/v1/asample", live.greedy()),
        ("/api/v1/get_info", {"model_id": live.model_id}),
    ):
        refused(client.post(path, json=value, headers={"X-API-Key": ""}))
    live.unharmed()


# ---------------------------------------------------------------- bounds: the queue, leaving clients, sessions


@contextlib.contextmanager
def busy_worker(service: TinkerService) -> Iterator[threading.Event]:
    """The worker held on one job until the event is set (or the block ends): what comes in queues."""
    gate = threading.Event()
    service.submit("hold", lambda: gate.wait(30), None)
    deadline = time.monotonic() + 10
    while service.waiting and time.monotonic() < deadline:  # until the worker has taken it
        time.sleep(0.01)
    try:
        yield gate
    finally:
        gate.set()


def optim(server: Server, model_id: str) -> Any:
    return server.post("/api/v1/optim_step", {"model_id": model_id, "adam_params": {"learning_rate": 0.0}})


def test_a_full_queue_is_a_503_and_a_silent_client_has_its_queued_work_dropped(tiny, tmp_path):
    with serve(tiny, tmp_path, max_waiting=2, session_timeout_s=5.0) as server:
        # 5 s, not less: creating the training client takes seconds on a loaded 2-core machine, and
        # until the heartbeat below nothing the test sends counts as the session being heard from
        session = server.session()
        model_id = server.training_client(session)
        server.ok("/api/v1/session_heartbeat", {"session_id": session})
        with busy_worker(server.service) as gate:
            queued = [optim(server, model_id).json()["request_id"] for _ in range(2)]
            full = optim(server, model_id)
            assert full.status_code == 503 and full.headers["retry-after"] == "1"
            assert full.json()["detail"] == (
                "request: 2 requests already wait for the model on this server (--max-waiting 2); retry later"
            )
            health = server.client.get("/health").json()
            assert (health["requests_waiting"], health["requests_refused_busy"]) == (2, 1)
            time.sleep(5.2)  # no heartbeat, no request: the client has gone
            health = server.client.get("/health").json()  # any request ends the silent sessions
            assert (health["sessions"], health["training_clients"]) == (0, 0)
            gate.set()
            gone = f"session: {session!r} has expired: no heartbeat or request for 5 s (--session-timeout-s)"
            for request_id in queued:
                assert server.outcome(request_id) == {
                    "error": f"{gone}; this request was dropped before it ran",
                    "category": "user",
                }
        assert server.client.get("/health").json()["requests_dropped"] == 2
        beat = server.post("/api/v1/session_heartbeat", {"session_id": session})
        assert beat.status_code == 410 and beat.json()["detail"] == f"session_id: session {session!r} has expired: no heartbeat or request for 5 s (--session-timeout-s)"  # fmt: skip
        info = server.post("/api/v1/get_info", {"model_id": model_id})
        refused(info, f"model_id: training client {model_id!r} is gone: its session has expired")


def test_a_closed_session_has_its_queued_work_dropped_and_sessions_are_capped(tiny, tmp_path):
    with serve(tiny, tmp_path, max_sessions=2) as server:
        kept, closing = server.session(), server.session()
        refused(server.post("/api/v1/create_session", {"sdk_version": "0.38.0"}), "sessions: this server holds at most 2 at once (--max-sessions)")  # fmt: skip
        model_id = server.training_client(closing)
        with busy_worker(server.service) as gate:
            request_id = optim(server, model_id).json()["request_id"]
            threading.Timer(0.3, gate.set).start()  # the close waits for the adapter to be freed
            closed = server.post(f"/api/v1/sessions/{closing}/finish", {"reason": {"type": "success"}, "detail": None})  # fmt: skip
            assert closed.status_code == 200, closed.text
        assert server.outcome(request_id) == {
            "error": f"session: {closing!r} has finished; this request was dropped before it ran",
            "category": "user",
        }
        server.session()  # a closed session frees its place
        server.ok("/api/v1/session_heartbeat", {"session_id": kept})
        assert server.client.get("/health").json()["training_clients"] == 0
