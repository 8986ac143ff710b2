"""A rollout engine over HTTP inference servers: `turnrl serve`, SGLang or vLLM.

    engine = ServerEngine(["http://10.0.0.2:8000", "http://10.0.0.3:8000"], cfg.rollout.server,
                          eos_ids=..., vocab_size=..., weights=actor_state_dict, weights_dir="runs/x/w")
    gen = engine.generate(prompt_ids, params, max_new_tokens_per_row)   # rows A,A,B,B
    engine.sync_weights(version)     # write runs/x/w/v<version>, every server loads it, versions checked

Token in, token out: prompts go as token ids and the sampled ids come back verbatim (vLLM's and
SGLang's `return_token_ids`, or vLLM's "token_id:N" tokens), never as text to re-tokenise.

One `generate` becomes several OpenAI-style `/v1/completions` requests: rows are grouped by their
token budget (an OpenAI request has one `max_tokens`; multi-turn episodes have one budget each),
split so every server gets work, and sent concurrently from a thread pool to the least-loaded
server. A request that meets a connection error, a timeout or a 5xx is retried on the next server.
Each response's `policy_version` must equal the last synced version: a server that lags would
make the trainer learn from another policy's samples without knowing it.

A server that fails is routed around and, where it is the engine's own child, brought back:

- the run's own `turnrl serve` child (no `rollout.server.urls`) that died (SIGKILL, the OOM
  killer) is started again on its port, loaded with the trainer's current weights, and what was in
  flight is sent again: `restarts` counts it. A child that cannot start again stops the run with
  its log's tail;
- an external server that stops answering is marked down: requests go to the others, and a weight
  sync it misses leaves it stale, so it serves nothing until it has loaded the current version
  (tried again at each `generate`, at most every `DOWN_RETRY_S`). Only when every server is gone
  does the run stop.

Every generation row comes from exactly one answered request: a request is sent again only when
no answer of it was read, so nothing is lost or sampled twice (`retried` counts the re-sends, and
`counters()` reports them as `rollout/server/*` metrics).

Every request carries the servers' key (`rollout.server.api_key`, else $TURNRL_API_KEY; the child
server's own key for the child), and requests are cut to fit what each server's /health
advertises under "limits" (rows and tokens per request), so training never trips them. turnrl
serve takes only increasing versions: a re-sync of the version a server already holds (a resume,
an evaluation's version 0) loads under the server's next version, and the engine maps that
server's reports back (`offset`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch

from turnrl.config.schema import ServerConfig
from turnrl.keys import auth_headers
from turnrl.rollout.base import Generation, SamplingParams, row_limits
from turnrl.rollout.server_wire import (
    Request,
    ServerError,
    ServerUnreachable,
    as_version,
    choice_token_ids,
    finish_reason,
    plan_requests,
    response_detail,
)

log = logging.getLogger(__name__)

DOWN_RETRY_S = 10.0
"""How long an external server marked down is left alone before the engine tries it again."""


class ServerEngine:
    """RolloutEngine over inference servers; see the module docstring."""

    concurrent = True  # generate may be called from several threads at once (streamed agent episodes)

    def __init__(
        self,
        urls: list[str],
        cfg: ServerConfig,
        *,
        eos_ids: set[int],
        vocab_size: int,
        weights: Callable[[], dict[str, torch.Tensor]] | None = None,
        weights_dir: str | Path | None = None,
        model_config: Any = None,
        model_name: str | None = None,
        rows_per_request: int = 64,
        child: Any = None,
        api_key: str | None = None,
    ) -> None:
        """`weights`: the actor's full HF-named state dict, read at each `sync_weights`; written with
        `model_config` (a transformers config or dict) as `config.json` under `weights_dir`.
        `model_name`: if given, every server must serve a model of that id. `child`: a server process
        this engine owns (a `ServeProcess`); `close()` stops it. `api_key`: the servers' key (None =
        `cfg.api_key`, whose '' means $TURNRL_API_KEY)."""
        if not urls:
            raise ServerError("rollout.server.urls: no inference server given")
        self.urls = [u.rstrip("/").removesuffix("/v1") for u in urls]
        self.cfg, self.eos_ids, self.vocab_size = cfg, set(eos_ids), vocab_size
        self.weights, self.model_config = weights, model_config
        self.weights_dir = Path(weights_dir) if weights_dir else None
        self.rows_per_request = max(1, rows_per_request)
        self.child = child
        self.version = 0  # the trainer's; servers must report it once they can report anything
        self.max_lag = 0
        """Versions a response may lag the trainer's: 0 (sync mode) or `trainer.max_staleness` in
        async mode, where a request may start before a weight update and answer after it."""
        timeout = httpx.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, 10.0))
        # the key goes with every request: health, models, completions, weight loads, model info
        self.client = httpx.Client(
            timeout=timeout, headers=auth_headers(cfg.api_key if api_key is None else api_key)
        )
        self.pool = ThreadPoolExecutor(
            max_workers=max(4, 2 * len(self.urls)), thread_name_prefix="turnrl-rollout"
        )
        self.inflight = dict.fromkeys(self.urls, 0)
        self.completed = dict.fromkeys(self.urls, 0)  # requests answered, per server (load spread)
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self.served: dict[str, str] = {}  # url -> model id to put in requests
        self.limits: dict[str, dict[str, int]] = {}  # url -> the "limits" its /health advertises
        self.offset = dict.fromkeys(self.urls, 0)
        """Per server: its version minus the trainer's (> 0 once a version was synced twice)."""
        self.down: dict[str, float] = {}
        """Servers that failed, and when: none is picked while any other is up."""
        self.stale: set[str] = set()
        """Servers that missed a weight sync: none serves until it loaded the current version."""
        self.down_retry_s = DOWN_RETRY_S
        self.restarts = 0  # the own child started again after it died
        self.retried = 0  # requests sent again after a server failed them (their rows read once)
        self._revive_lock = threading.Lock()
        try:
            for url, fut in [(u, self.pool.submit(self._connect, u, model_name)) for u in self.urls]:
                self.served[url] = fut.result()
        except BaseException:
            self.close()
            raise
        # requests go to whichever server is least loaded: each must fit every server's limits
        self.rows_per_request = min([self.rows_per_request, *self._advertised("max_rows_per_request")])
        self.max_tokens = min(self._advertised("max_tokens_per_request"), default=None)

    def _advertised(self, limit: str) -> list[int]:
        return [lim[limit] for lim in self.limits.values() if limit in lim]

    # -- start-up -----------------------------------------------------------------------------
    def _connect(self, url: str, model_name: str | None) -> str:
        """Wait for `url`, check it serves the trainer's model; its model id."""
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        health: Any = None
        r: httpx.Response | None
        while True:
            try:
                r = self.client.get(f"{url}/health", timeout=5.0)
                if r.status_code == 200:
                    health = r.json() if r.content.strip() else {}
                    break
            except (httpx.HTTPError, ValueError):
                r = None
            if r is not None and r.status_code in (401, 403):  # up, but not for us: waiting changes nothing
                raise ServerError(
                    f"rollout.server.urls: inference server {url} refused the key (HTTP {r.status_code}: "
                    f"{response_detail(r)}); set rollout.server.api_key or $TURNRL_API_KEY to the server's key"
                )
            if time.monotonic() > deadline:
                raise ServerError(
                    f"inference server {url} did not answer {url}/health within "
                    f"{self.cfg.startup_timeout_s:.0f} s (rollout.server.startup_timeout_s)"
                )
            time.sleep(0.2)
        try:
            r = self.client.get(f"{url}/v1/models", timeout=10.0)
            cards = r.json()["data"] if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            cards = None
        if not cards:
            raise ServerError(f"{url}/v1/models lists no model; is it an OpenAI-compatible server?")
        card = cards[0]
        model_id = str(card.get("id"))
        health = health if isinstance(health, dict) else {}
        vocab = health.get("vocab_size", card.get("vocab_size"))
        if vocab is not None and int(vocab) != self.vocab_size:
            raise ServerError(
                f"{url} serves {model_id} with vocab size {vocab}, but the trainer's model has vocab size "
                f"{self.vocab_size}: not the same model"
            )
        if vocab is None:
            log.warning(
                "%s does not report its vocab size: the trainer cannot check it serves the same model", url
            )
        if model_name and model_id != model_name:
            raise ServerError(f"{url} serves model {model_id!r}, but the trainer's model is {model_name!r}")
        limits = health.get("limits")  # turnrl serve's; vLLM and SGLang advertise none
        if isinstance(limits, dict):
            self.limits[url] = {k: v for k, v in limits.items() if isinstance(v, int) and v > 0}
        return model_id

    def _server_version(self, url: str) -> int | None:
        """The policy version a server reports: turnrl's /health, else SGLang's (get_)model_info."""
        for path, key in (("/health", "policy_version"), ("/model_info", "weight_version"),
                          ("/get_model_info", "weight_version")):  # fmt: skip
            try:
                r = self.client.get(url + path, timeout=10.0)
                value = r.json().get(key) if r.status_code == 200 and r.content.strip() else None
            except (httpx.HTTPError, ValueError, AttributeError):
                value = None
            if as_version(value) is not None:
                return as_version(value)
        return None

    # -- generation ---------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation:
        if self.stale:
            self._recover()
        limits = row_limits(prompt_ids, params, max_new_tokens_per_row)
        rows = len(limits)
        requests = plan_requests(
            prompt_ids, params.n, limits, self.rows_per_request, len(self.urls), params.seed, self.max_tokens
        )
        futures = [self.pool.submit(self._complete, req, params) for req in requests]
        ids: list[list[int]] = [[] for _ in range(rows)]
        lps: list[list[float]] = [[] for _ in range(rows)]
        reasons = ["length"] * rows
        versions: dict[str, int] = {}
        row_version = [self.version] * rows
        try:
            for req, fut in zip(requests, futures, strict=True):
                url, version, choices = fut.result()
                if version is not None:
                    versions[url] = min(version, versions.get(url, version))
                for row, (i, lp, reason) in zip(req.rows, choices, strict=True):
                    ids[row], lps[row], reasons[row] = i, lp, reason
                    row_version[row] = self.version if version is None else version
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
        oldest = self._check_versions(versions)
        mixed = len(set(row_version)) > 1  # async: requests on both sides of a weight update
        token_versions = [[v] * len(i) for v, i in zip(row_version, ids, strict=True)] if mixed else None
        return Generation(ids, lps, reasons, policy_version=oldest, token_versions=token_versions)

    def _check_versions(self, versions: dict[str, int]) -> int:
        if self.max_lag == 0 and len(set(versions.values())) > 1:
            seen = ", ".join(f"{u} v{v}" for u, v in sorted(versions.items()))
            raise ServerError(f"inference servers sampled one batch with different policy versions: {seen}")
        for url, v in versions.items():
            if not self.version - self.max_lag <= v <= self.version:
                raise ServerError(
                    f"{url} reports policy version {v}, but the trainer is at version {self.version}: "
                    f"its samples would be off-policy (restart it, or check that it loaded the synced weights)"
                )
        return min(versions.values(), default=self.version)

    def _pick(self, tried: list[str]) -> str:
        """The least-loaded server not tried yet for this request (round-robin among equals), among
        those up and current; ServerError when none is."""
        with self._lock:
            usable = [u for u in self.urls if u not in self.stale and u not in self.down]
            usable = usable or [u for u in self.urls if u not in self.stale]
            if not usable:
                raise ServerError(
                    f"every inference server missed the weights of policy version {self.version} "
                    f"({', '.join(self.urls)}): none can sample for the trainer"
                )
            fresh = [u for u in usable if u not in tried] or usable
            k = next(self._turn) % len(fresh)
            url = min(fresh[k:] + fresh[:k], key=lambda u: self.inflight[u])
            self.inflight[url] += 1
            return url

    def _complete(
        self, req: Request, params: SamplingParams
    ) -> tuple[str, int | None, list[tuple[list[int], list[float], str]]]:
        tried: list[str] = []
        failures: list[str] = []
        for _ in range(self.cfg.max_retries + 1):
            url = self._pick(tried)
            tried.append(url)
            try:
                r = self.client.post(f"{url}/v1/completions", json=self._body(url, req, params))
            except httpx.TransportError as err:  # refused, reset, timed out: try the next server
                failures.append(f"{url} ({type(err).__name__})")
                self._failed(url)
                continue
            finally:
                with self._lock:
                    self.inflight[url] -= 1
            if r.status_code >= 500:
                failures.append(f"{url} (HTTP {r.status_code}: {response_detail(r)})")
                self._failed(url)
                continue
            with self._lock:
                self.down.pop(url, None)
                self.retried += bool(failures)
            if r.status_code != 200:
                raise ServerError(
                    f"{url} refused a completion request: HTTP {r.status_code}: {response_detail(r)}"
                )
            with self._lock:
                self.completed[url] += 1
            if failures:
                log.warning("completion request retried on %s after: %s", url, "; ".join(failures))
            data = r.json()
            served = as_version(data.get("policy_version"))
            version = None if served is None else served - self.offset[url]  # the trainer's numbering
            return url, version, self._parse(url, data, req)
        raise ServerError(
            f"inference server unreachable after {len(failures)} attempts "
            f"(rollout.server.max_retries={self.cfg.max_retries}): {'; '.join(failures)}"
        )

    # -- failures -----------------------------------------------------------------------------
    def _failed(self, url: str) -> None:
        """A request to `url` failed: start the own child again if it died, else mark it down."""
        if self._revive(url):
            return
        with self._lock:
            self.down.setdefault(url, time.monotonic())

    def _revive(self, url: str) -> bool:
        """If `url` is the engine's own child and its process has exited, start it again on its
        port with the trainer's current weights; True once it serves again. One thread restarts,
        the others that met the dead child wait for it."""
        child = self.child
        if child is None or url != self.urls[0]:
            return False
        if child.alive():
            with contextlib.suppress(subprocess.TimeoutExpired):  # a killed child may still be exiting
                child.process.wait(timeout=1.0)
            if child.alive():
                return True  # it answered badly, but it lives: the retry goes to it again
        with self._revive_lock:
            if child.alive():  # another thread brought it back meanwhile
                return True
            log.warning(
                "the run's inference server %s exited (status %s); starting it again on its port",
                url,
                child.returncode,
            )
            try:
                child.restart()
            except Exception as err:
                raise ServerError(
                    f"the run's inference server {url} died and could not start again: "
                    f"{' '.join(str(err).split())}"
                ) from None
            self.offset[url] = 0  # a fresh server, at its own version 0
            if self.version:
                self._load(url, self._current_weights(), self.version, revive=False)
            with self._lock:
                self.restarts += 1
                self.down.pop(url, None)
            return True

    def _current_weights(self) -> Path:
        """The directory of the trainer's current version, written again if it is gone."""
        assert self.weights_dir is not None
        path = self.weights_dir / f"v{self.version}"
        if not (path / "model.safetensors").is_file():
            from turnrl.models.weights_dir import write_weights_dir

            assert self.weights is not None
            path = write_weights_dir(self.weights(), path, self.model_config)
        return path

    def _recover(self) -> None:
        """Stale servers whose down time is over: try to load the current weights into them."""
        now = time.monotonic()
        for url in sorted(self.stale):
            if now - self.down.get(url, 0.0) < self.down_retry_s or not self.version:
                continue
            try:
                self._load(url, self._current_weights(), self.version)
            except ServerError as err:
                with self._lock:
                    self.down[url] = time.monotonic()
                log.warning("inference server %s still cannot take the current weights: %s", url, err)
                continue
            with self._lock:
                self.stale.discard(url)
                self.down.pop(url, None)
            log.warning("inference server %s is back, at policy version %d", url, self.version)

    def counters(self) -> dict[str, float]:
        """So far in the run (a step's count would blink): `rollout/server/<name>` metrics."""
        with self._lock:
            return {
                "restarts": float(self.restarts),
                "retried_requests": float(self.retried),
                "servers_down": float(len(set(self.down) | self.stale)),
            }

    def _body(self, url: str, req: Request, p: SamplingParams) -> dict[str, Any]:
        return {
            "model": self.served[url],
            "prompt": req.prompts,
            "max_tokens": req.budget,
            "n": req.n,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": p.top_k if p.top_k > 0 else -1,
            "stop": list(p.stop) or None,
            "seed": req.seed,
            "ignore_eos": p.ignore_eos,  # vLLM and SGLang take it too
            "logprobs": 1,  # the sampled token's log-prob (vLLM/SGLang add one alternative)
            "return_tokens_as_token_ids": True,  # vLLM before return_token_ids existed
            "return_token_ids": True,
            "skip_special_tokens": False,  # stop strings like "<|im_end|>" must match, as in HFEngine
        }

    def _parse(
        self, url: str, data: dict[str, Any], req: Request
    ) -> list[tuple[list[int], list[float], str]]:
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != len(req.prompts) * req.n:
            raise ServerError(
                f"{url} returned {len(choices)} choices for {len(req.prompts)} prompts x n={req.n}"
            )
        out = []
        for k, choice in enumerate(choices):
            ids = choice_token_ids(choice)
            if ids is None:
                raise ServerError(
                    f"{url} returned no token ids; it needs return_token_ids (vLLM >= 0.10.2, SGLang) or "
                    f"return_tokens_as_token_ids (vLLM)"
                )
            sent = choice.get("prompt_token_ids")
            if sent is not None and list(sent) != req.prompts[k // req.n]:
                raise ServerError(
                    f"{url} returned choice {k} for another prompt (expected prompt-major order)"
                )
            lps = (choice.get("logprobs") or {}).get("token_logprobs")
            if lps is None or len(lps) != len(ids) or any(v is None for v in lps):
                raise ServerError(f"{url} returned no log-prob for every sampled token (choice {k})")
            if len(ids) > req.budget:
                raise ServerError(f"{url} returned {len(ids)} tokens for max_tokens={req.budget}")
            out.append((ids, [float(v) for v in lps], finish_reason(choice.get("finish_reason"), url)))
        return out

    # -- weights ------------------------------------------------------------------------------
    def sync_weights(self, version: int) -> None:
        """Write the actor's weights as policy version `version`, have every server load them, and
        check every server reports that version."""
        if self.weights is None or self.weights_dir is None:
            raise ServerError("this ServerEngine was built without the actor's weights: it cannot sync them")
        from turnrl.models.weights_dir import write_weights_dir

        path = write_weights_dir(self.weights(), self.weights_dir / f"v{version}", self.model_config)
        futures: list[Future[None]] = [self.pool.submit(self._load, u, path, version) for u in self.urls]
        missed: dict[str, str] = {}
        for url, fut in zip(self.urls, futures, strict=True):
            try:
                fut.result()
            except ServerUnreachable as err:  # an external server gone: it misses this version
                missed[url] = str(err)
        if len(missed) == len(self.urls):
            raise ServerError("; ".join(missed.values()))
        with self._lock:
            self.stale = set(missed)
            for url in missed:
                self.down.setdefault(url, time.monotonic())
        for url, why in missed.items():
            log.warning("inference server %s missed policy version %d; it serves nothing until it loads it: %s", url, version, why)  # fmt: skip
        self.version = version
        for old in self.weights_dir.glob("v*"):  # every server holds `path` in memory now
            if old != path and old.is_dir() and old.name[1:].isdigit():
                shutil.rmtree(old, ignore_errors=True)

    def _post_load(self, url: str, path: Path, version: int, revive: bool = True) -> httpx.Response:
        # SGLang's field names only (turnrl serve reads them too): a stricter server could refuse others
        body = {"model_path": str(path.resolve()), "weight_version": str(version + self.offset[url])}
        last = "no attempt"
        for _ in range(self.cfg.max_retries + 1):
            try:
                return self.client.post(f"{url}/update_weights_from_disk", json=body)
            except httpx.TransportError as err:
                last = type(err).__name__
                if revive and self.child is not None and url == self.urls[0] and not self.child.alive():
                    # the own child died: start it again (it gets this version when it is current)
                    self._revive(url)
                    body["weight_version"] = str(version + self.offset[url])
        tail = ""
        if self.child is not None and url == self.urls[0]:
            tail = f"; its log ends: {' | '.join(self.child.log_tail(3).splitlines())}"
        raise ServerUnreachable(
            f"inference server {url} unreachable while loading policy version {version}: {last} "
            f"after {self.cfg.max_retries + 1} attempts of rollout.server.timeout_s={self.cfg.timeout_s:g}s{tail}"
        )

    def _load(self, url: str, path: Path, version: int, revive: bool = True) -> None:
        """`revive`: start the own child again if it died meanwhile (not from within a restart)."""
        r = self._post_load(url, path, version, revive)
        if r.status_code == 409:
            # turnrl serve takes only newer versions, and this server holds this one or a later one
            # already (a resume, an evaluation's version 0): load it as the server's next version,
            # and read that server's versions back through the new offset
            held = self._server_version(url)
            if held is not None:
                self.offset[url] = held + 1 - version
                r = self._post_load(url, path, version, revive)
        if r.status_code == 404:
            raise ServerError(
                f"{url} has no /update_weights_from_disk, so it cannot take new weights "
                f"(turnrl serve and SGLang have it; vLLM has not: see docs/serve.md)"
            )
        answer: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            answer = r.json()
        if r.status_code != 200 or answer.get("success") is False:
            raise ServerError(
                f"{url} refused the weights of policy version {version} ({path}): {response_detail(r)}"
            )
        served = version + self.offset[url]
        reported = as_version(answer.get("policy_version", answer.get("weight_version")))
        now = self._server_version(url)
        if reported not in (None, served) or now != served:
            wrong = now if reported in (None, served) else reported
            raise ServerError(
                f"{url} reports policy version {wrong} after loading version {served}: it would sample "
                f"with other weights than the trainer's"
            )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
        if self.child is not None:
            child, self.child = self.child, None
            child.stop()


__all__ = ["Request", "ServerEngine", "ServerError", "choice_token_ids", "finish_reason", "plan_requests"]
