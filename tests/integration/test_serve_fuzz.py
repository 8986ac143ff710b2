"""A careless or hostile client against one real `turnrl serve` (tiny-random, CPU, one thread).

Every bad request must get a 4xx whose `detail` is one line naming the culprit (field, limit and
its option, file, key), and must leave the server as it was: `/health` answers at once, and a
fixed greedy request answers exactly as it did before anything was sent. Cases: malformed and
deeply nested JSON, wrong types, bodies past `--max-body` (announced, and chunked), NaN and
out-of-range numbers, unknown fields, rows and tokens past the limits, missing and wrong keys,
weights from outside `--weights-root` (../, a symlink, an absolute path), a FIFO named
model.safetensors, int8 and NaN weights, versions that do not go up, and a client that leaves
in the middle of a long request (its work is stopped, the next request does not wait for it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from tests.support.cli import console_script
from tests.support.serving import EQ, TIME
from turnrl.models.weights_dir import write_weights_dir
from turnrl.rollout.hf import HFEngine
from turnrl.servers.inference.app import create_app
from turnrl.servers.inference.launcher import ServeProcess

MAX_BODY = 1 << 20  # small, so the limit is cheap to pass
MAX_TOKENS = 100_000  # below what 1024 rows of tiny-random can ask, so it can be passed
REF = {"prompt": [EQ, TIME], "max_tokens": 6, "temperature": 0, "logprobs": 0, "return_token_ids": True}


class Served:
    def __init__(self, proc: ServeProcess, root: Path) -> None:
        self.proc, self.root, self.url = proc, root, proc.url
        self.client = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=30)
        self.reference: list[Any] = []

    def answer(self) -> list[Any]:
        r = self.client.post("/v1/completions", json=REF)
        assert r.status_code == 200, r.text
        return [
            (c["token_ids"], c["logprobs"]["token_logprobs"], c["finish_reason"]) for c in r.json()["choices"]
        ]

    def health(self) -> dict[str, Any]:
        start = time.monotonic()
        r = self.client.get("/health", timeout=2)
        assert r.status_code == 200 and time.monotonic() - start < 2
        return r.json()

    def unharmed(self) -> None:
        """Healthy, and the fixed greedy request answers as the first time, to the bit."""
        self.health()
        assert self.answer() == self.reference

    def load(self, body: Any, **kw: Any) -> httpx.Response:
        return self.client.post("/update_weights_from_disk", json=body, **kw)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("weights_root")
    limits = ["--max-body", str(MAX_BODY), "--max-tokens-per-request", str(MAX_TOKENS)]
    proc = ServeProcess(
        "tiny-random",
        "cpu",
        "float32",
        startup_timeout_s=120,
        seed=0,
        weights_root=root,
        extra_args=["--threads", "1", *limits],
    )
    with proc:
        s = Served(proc, root)
        s.reference = s.answer()
        yield s
        s.client.close()


def refused(r: httpx.Response, status: int, *words: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert "\n" not in detail and all(w in detail for w in words), detail


# ---------------------------------------------------------------- completions


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b'{"prompt": [1, 2', 400, ["request body: not valid JSON"]),
        (b'{"prompt":[[1,2]],"temperature":NaN}', 400, ["temperature"]),
        (b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400, ["not valid JSON", "recursion"]),
        (b"[1, 2]", 400, ["request body: must be a JSON object"]),
        (b"", 400, ["request body: missing"]),
        ({"prompt": {"a": 1}}, 400, ["prompt"]),
        ({"prompt": [1.5, 2]}, 400, ["prompt"]),
        ({"prompt": [1, 2], "n": "many"}, 400, ["n:"]),
        ({"prompt": [1, 2], "stop": 5}, 400, ["stop"]),
        ({"prompt": [1, 2], "max_tokens": True, "temperature": [1]}, 400, ["max_tokens", "1 more problem"]),
        ({"prompt": [[1, 2]], "seed": 2**64}, 400, ["seed"]),
        ({"prompt": [[1, 2]], "seed": -(2**63) - 1}, 400, ["seed"]),
        ({"prompt": [[1, 2]], "temperature": -1}, 400, ["temperature"]),
        ({"prompt": [[1, 2]], "temperature": 1e-300}, 400, ["temperature"]),
        ({"prompt": [[1, 2]], "top_p": 0}, 400, ["top_p"]),
        ({"prompt": [[1, 2]], "top_k": -7}, 400, ["top_k"]),
        ({"prompt": [[1, 2]], "logprobs": -1}, 400, ["logprobs"]),
        ({"prompt": [[1, 2]], "max_tokens": 0}, 400, ["max_tokens"]),
        ({"prompt": [[1, 2]], "max_tokens": 10**30}, 413, ["max_tokens", "--max-tokens-per-request"]),
        ({"prompt": [[1, 2]], "max_token": 3}, 400, ["max_token: unknown field; did you mean 'max_tokens'?"]),
        ({"prompt": [[1, 2]], "stream": True}, 400, ["stream: not supported"]),
        ({"prompt": [[1, 2]], "presence_penalty": 0.5}, 400, ["presence_penalty: not supported"]),
        ({"prompt": [[1, 2]], "n": 1025}, 413, ["n:", "1025 rows", "--max-rows-per-request"]),
        ({"prompt": [[1, 2]] * 1025}, 413, ["1025 rows", "--max-rows-per-request"]),
        ({"prompt": [[1, 2]] * 100, "max_tokens": 1001}, 413, ["max_tokens", "--max-tokens-per-request"]),
        ({"prompt": [[1, 2, 49152]]}, 400, ["prompt[0][2]"]),
    ],
)
def test_bad_completion_requests(served: Served, body: Any, status: int, words: list[str]) -> None:
    if isinstance(body, bytes):
        r = served.client.post("/v1/completions", content=body)
    else:
        r = served.client.post("/v1/completions", json=body)
    refused(r, status, *words)
    served.unharmed()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("max_tokens", "3", "max_tokens: Input should be a valid integer"),
        ("max_tokens", True, "max_tokens: Input should be a valid integer"),
        ("max_tokens", 3.0, "max_tokens: Input should be a valid integer"),
        ("temperature", "1", "temperature: Input should be a valid number"),
        ("temperature", True, "temperature: Input should be a valid number"),
        ("seed", "7", "seed: Input should be a valid integer"),
        ("ignore_eos", "yes", "ignore_eos: Input should be a valid boolean"),
        ("ignore_eos", 1, "ignore_eos: Input should be a valid boolean"),
    ],
)
def test_a_string_or_a_bool_for_a_number_is_refused(
    served: Served, field: str, value: Any, words: str
) -> None:
    """Strict types (servers.validation.StrictRequest): once `"max_tokens": "3"` was read as 3 and
    `"temperature": "1"` as 1.0; a client that sends a number as text has a bug worth a 400."""
    r = served.client.post("/v1/completions", json={**REF, field: value})
    refused(r, 400, words)
    assert r.json()["detail"] == words
    served.unharmed()


def test_a_json_integer_for_a_float_is_a_number(served: Served) -> None:
    """What the OpenAI SDK sends for `temperature=1`, `top_p=1`: JSON integers, taken as floats."""
    r = served.client.post("/v1/completions", json={**REF, "temperature": 1, "top_p": 1, "seed": 3})
    assert r.status_code == 200, r.text
    assert served.client.post("/v1/completions", json={**REF, "temperature": 0.0}).status_code == 200


def test_fields_real_clients_send_are_accepted(served: Served) -> None:
    body = {
        **REF,
        "user": "episode-7",
        "stream": False,
        "stream_options": {"include_usage": True},
        "presence_penalty": 0.0,
        "skip_special_tokens": False,
        "return_tokens_as_token_ids": True,
        "top_k": -1,
        "seed": 2**64 - 1,
    }
    r = served.client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    got = [(c["token_ids"], c["logprobs"]["token_logprobs"], c["finish_reason"]) for c in r.json()["choices"]]
    assert got == served.reference  # greedy: the seed changes nothing


def test_bodies_past_the_limit(served: Served) -> None:
    r = served.client.post("/v1/completions", content=b"x" * (MAX_BODY + 1))
    refused(r, 413, "request body", f"limit of {MAX_BODY} bytes", "--max-body")
    served.unharmed()
    sent = 0

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked, refused while it streams in
        nonlocal sent
        for _ in range(1024):  # 64 MiB, if nobody stopped it
            sent += 64 << 10
            yield b"[" * (64 << 10)

    with contextlib.suppress(
        httpx.HTTPError
    ):  # the server may close while we still write: refused either way
        refused(served.client.post("/v1/completions", content=chunks()), 413, "--max-body")
    assert sent < 24 * MAX_BODY  # the limit plus what the kernel's socket buffers take in
    served.unharmed()


def test_missing_and_wrong_keys(served: Served) -> None:
    for route in ("/health", "/v1/models"):
        refused(httpx.get(served.url + route), 401, "api key: missing")
    refused(httpx.post(served.url + "/v1/completions", json=REF), 401, "api key: missing")
    wrong = {"Authorization": "Bearer not-the-key"}
    refused(httpx.post(served.url + "/v1/completions", json=REF, headers=wrong), 401, "api key: wrong key")
    refused(httpx.post(served.url + "/update_weights_from_disk", json={}, headers=wrong), 401, "wrong key")
    served.unharmed()


def test_a_client_that_leaves_has_its_work_stopped(served: Served) -> None:
    before = served.health()
    # 1024 rows x 90 tokens: minutes of work on this CPU (a forward batch of 64 rows takes ~10 s)
    big = {"prompt": [EQ] * 256, "n": 4, "max_tokens": 90, "ignore_eos": True, "temperature": 1.0}
    with pytest.raises(httpx.TimeoutException):
        served.client.post("/v1/completions", json=big, timeout=1.0)
    start = time.monotonic()
    served.unharmed()
    assert time.monotonic() - start < 10
    after = served.health()
    stopped = sum(after[k] - before[k] for k in ("requests_dropped", "requests_aborted"))
    assert stopped == 1, (before, after)


# ---------------------------------------------------------------- weight updates


def _state(tiny: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in tiny[0].state_dict().items()}


def test_weights_only_from_inside_the_root(served: Served, tiny: Any, tmp_path: Path) -> None:
    outside = write_weights_dir(_state(tiny), tmp_path / "outside")
    (served.root / "escape").symlink_to(outside, target_is_directory=True)
    version = served.health()["policy_version"] + 1
    for path in ("../", str(outside), "escape", str(served.root / ".." / outside.name), "/etc"):
        r = served.load({"model_path": path, "policy_version": version})
        refused(r, 403, f"model_path {path!r}", "--weights-root")
        assert r.json()["success"] is False
        served.unharmed()


def test_a_fifo_is_refused_and_health_answers_meanwhile(served: Served) -> None:
    fifo = served.root / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "model.safetensors")  # reading it would block until a writer came: never
    answers: list[httpx.Response] = []
    load = threading.Thread(target=lambda: answers.append(served.load({"model_path": "fifo"}, timeout=30)))
    load.start()
    served.health()  # within 2 s, whatever the load does
    load.join(30)
    refused(answers[0], 400, "model.safetensors: not a regular file")
    served.unharmed()


@pytest.mark.parametrize(
    ("tensor", "words"),
    [
        (
            torch.ones(64, dtype=torch.int8),
            ["model.norm.weight has dtype int8, the served model has float32"],
        ),
        (torch.full((64,), float("nan")), ["model.norm.weight has NaN or infinite values"]),
    ],
)
def test_bad_tensors_are_refused(served: Served, tiny: Any, tensor: torch.Tensor, words: list[str]) -> None:
    state = _state(tiny)
    state["model.norm.weight"] = tensor
    name = f"bad-{tensor.dtype}".replace("torch.", "")
    write_weights_dir(state, served.root / name)
    version = served.health()["policy_version"] + 1
    refused(served.load({"model_path": name, "policy_version": version}), 400, *words)
    assert served.health()["policy_version"] == version - 1
    served.unharmed()


def test_versions_only_go_up(served: Served, tiny: Any) -> None:
    write_weights_dir(_state(tiny), served.root / "start")  # the served weights again: same answers
    current = served.health()["policy_version"]
    for bad, words in ((-5, ["policy_version", "-5"]), (10**30, ["policy_version"])):
        refused(served.load({"model_path": "start", "policy_version": bad}), 400, *words)
        served.unharmed()
    refused(served.load({"model_path": "start", "weight_version": "-5"}), 400, "weight_version")
    # SGLang's own fields, as its clients send them, are understood
    sglang = {"load_format": "auto", "flush_cache": True, "abort_all_requests": False}
    ok = served.load({"model_path": "start", "weight_version": str(current + 1), **sglang})
    assert ok.status_code == 200 and ok.json()["policy_version"] == current + 1, ok.text
    for stale in (current + 1, current, 0):
        r = served.load({"model_path": "start", "policy_version": stale})
        refused(r, 409, f"policy_version: {stale} is not newer than the served version {current + 1}")
    refused(served.load({"model_path": "start", "policy_versoin": 9}), 400, "did you mean 'policy_version'")
    refused(served.load({"model_path": "start", "load_format": "pt"}), 400, "load_format")
    served.unharmed()


def test_weight_updates_are_off_without_a_root(tiny: Any) -> None:
    app = create_app(HFEngine(*tiny), "tiny-random", 2048)
    try:
        with TestClient(app) as client:
            r = client.post("/update_weights_from_disk", json={"model_path": "/anything"})
            refused(r, 403, "weight updates are off; start turnrl serve with --weights-root DIR")
    finally:
        app.state.server.batcher.close(5)


# ---------------------------------------------------------------- start-up and turnrl's own client


def test_start_up_refusals_are_one_line(cli: Any, capsys: Any, monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.delenv("TURNRL_API_KEY", raising=False)
    r = cli("serve", "--model", "tiny-random", "--host", "0.0.0.0")
    assert r.returncode == 1 and r.stderr.strip() == (
        "turnrl serve: error: --host 0.0.0.0: binding beyond loopback needs a key (--api-key KEY or "
        "$TURNRL_API_KEY); anyone who reaches the port could use the server"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli("serve", "--model", "tiny-random", "--port", str(port))
    assert r.returncode == 1 and r.stderr.strip() == (
        f"turnrl serve: error: --host 127.0.0.1 --port {port}: cannot listen (Address already in use)"
    )
    r = cli("serve", "--model", "tiny-random", "--weights-root", str(tmp_path / "nope"))
    assert (
        r.returncode == 1
        and r.stderr.strip() == f"turnrl serve: error: --weights-root {tmp_path / 'nope'}: not a directory"
    )
    for flag, value, words in (
        ("--port", "99999", "argument --port: 99999 is not a port in [0, 65535]"),
        ("--max-rows-per-request", "0", "argument --max-rows-per-request: must be >= 1, got 0"),
    ):
        with pytest.raises(SystemExit) as stopped:
            cli("serve", "--model", "tiny-random", flag, value)
        assert stopped.value.code == 2 and f"turnrl serve: error: {words}" in capsys.readouterr().err


@pytest.mark.slow
def test_settings_that_failed_after_loading_are_one_line_at_start_up() -> None:
    """Once `--dtype int8` ended in a TypeError traceback and `--log-level bogus` in a KeyError, both
    once the model had loaded; `--batch-wait-ms nan` served requests that never got an answer (inf:
    an OverflowError in the engine thread, then the same). Each is now one line at start-up, from the
    real console script (a server that starts anyway fails the test by its timeout)."""
    cases = {
        ("--dtype", "int8"): (
            1,
            "turnrl serve: error: --dtype 'int8': use auto, float32, bfloat16 or float16",
        ),
        ("--log-level", "bogus"): (2, "turnrl serve: error: argument --log-level: invalid choice: 'bogus'"),
        ("--batch-wait-ms", "nan"): (1, "turnrl serve: error: --batch-wait-ms nan: must be finite and >= 0"),
        ("--batch-wait-ms", "inf"): (1, "turnrl serve: error: --batch-wait-ms inf: must be finite and >= 0"),
        ("--batch-wait-ms", "1e300"): (1, "turnrl serve: error: --batch-wait-ms 1e+300: at most 60000"),
    }
    env = {k: v for k, v in os.environ.items() if k != "TURNRL_API_KEY"}
    base = [console_script(), "serve", "--model", "tiny-random", "--port", "0", "--threads", "1"]
    procs = {
        flags: subprocess.Popen(
            [*base, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for flags in cases
    }
    try:
        for flags, (code, line) in cases.items():
            _out, err = procs[flags].communicate(timeout=120)
            lines = err.strip().splitlines()
            assert procs[flags].returncode == code and len(lines) == 1, (
                flags,
                procs[flags].returncode,
                err[-3000:],
            )
            assert lines[0].startswith(line), (flags, lines[0])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_turnrl_s_client_with_another_key_stops_at_once(served: Served, tiny: Any) -> None:
    from turnrl.config.schema import ServerConfig
    from turnrl.rollout.hf import eos_ids
    from turnrl.rollout.server import ServerEngine, ServerError

    cfg = ServerConfig(startup_timeout_s=60, api_key="not-the-key")
    start = time.monotonic()
    with pytest.raises(
        ServerError, match=rf"inference server {served.url} refused the key \(HTTP 401: api key: wrong"
    ):
        ServerEngine([served.url], cfg, eos_ids=eos_ids(*tiny), vocab_size=49152)
    assert time.monotonic() - start < 10  # not after startup_timeout_s
    # with the key: the server's limits are read and requests are cut to fit them
    engine = ServerEngine(
        [served.url], ServerConfig(api_key=served.proc.api_key), eos_ids=eos_ids(*tiny), vocab_size=49152
    )
    try:
        assert engine.limits[served.url]["max_tokens_per_request"] == MAX_TOKENS
        assert engine.max_tokens == MAX_TOKENS and engine.rows_per_request == 64
    finally:
        engine.close()
