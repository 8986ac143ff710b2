"""`ServerEngine`: the `RolloutEngine` over inference servers, composed of a probe, a router, a child
keeper and a weight syncer (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch

from turnrl.config.schema import ServerConfig
from turnrl.keys import auth_headers
from turnrl.rollout.base import Generation, SamplingParams, row_limits
from turnrl.rollout.server.keeper import ChildKeeper
from turnrl.rollout.server.probe import ServerProbe
from turnrl.rollout.server.router import ServerRouter
from turnrl.rollout.server.weights import WeightDirs, WeightSyncer
from turnrl.rollout.server.wire import (
    Choice,
    Request,
    ServerError,
    as_version,
    completion_body,
    parse_choices,
    plan_requests,
)


class ServerEngine:
    """RolloutEngine over inference servers: plans each `generate` call into completion requests,
    has the router send them, puts the rows back in order and checks the policy versions the
    servers report. Routing and failover are the `router`'s, the own child server the `keeper`'s,
    weight sync and the policy version the `syncer`'s."""

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
        self.max_lag = 0
        """Versions a response may lag the trainer's: 0 (sync mode) or `trainer.max_staleness` in
        async mode, where a request may start before a weight update and answer after it."""
        self.client = _client(cfg, api_key)
        self.pool = ThreadPoolExecutor(max(4, 2 * len(self.urls)), thread_name_prefix="turnrl-rollout")
        self.probe = ServerProbe(self.client, cfg, vocab_size)
        self.keeper = ChildKeeper(child, self.urls[0], reload=self._reload_child)
        self.router = ServerRouter(self.client, self.urls, cfg.max_retries, revive=self.keeper.revive)
        dirs = WeightDirs(weights, Path(weights_dir) if weights_dir else None, model_config)
        self.syncer = WeightSyncer(self.client, cfg, dirs, self.pool, self.probe, self.router, self.keeper)
        self.served: dict[str, str] = {}  # url -> model id to put in requests
        self.limits: dict[str, dict[str, int]] = {}  # url -> the "limits" its /health advertises
        try:
            self._connect(model_name)
        except BaseException:
            self.close()
            raise
        # requests go to whichever server is least loaded: each must fit every server's limits
        self.rows_per_request = min([max(1, rows_per_request), *self._advertised("max_rows_per_request")])
        self.max_tokens = min(self._advertised("max_tokens_per_request"), default=None)

    def _connect(self, model_name: str | None) -> None:
        """Wait for every server at once and check each serves the trainer's model."""
        for url, fut in [(u, self.pool.submit(self.probe.connect, u, model_name)) for u in self.urls]:
            card = fut.result()
            self.served[url] = card.model_id
            if card.limits is not None:
                self.limits[url] = card.limits

    def _advertised(self, limit: str) -> list[int]:
        return [lim[limit] for lim in self.limits.values() if limit in lim]

    def _reload_child(self, url: str) -> None:
        """The keeper's: the own child at `url` started again, give it the current weights."""
        self.syncer.reload(url)

    # -- generation ---------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation:
        if self.router.stale:
            self.syncer.recover()
        limits = row_limits(prompt_ids, params, max_new_tokens_per_row)
        requests = plan_requests(
            prompt_ids, params.n, limits, self.rows_per_request, len(self.urls), params.seed, self.max_tokens
        )
        futures = [self.pool.submit(self._complete, req, params) for req in requests]
        rows = len(limits)
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

    def _complete(self, req: Request, params: SamplingParams) -> tuple[str, int | None, list[Choice]]:
        """Send `req` to one server (the next on failure); the server, the version it reported in
        the trainer's numbering, and its rows."""
        url, r = self.router.complete(
            lambda url: completion_body(self.served[url], req, params), self.version
        )
        data = r.json()
        version = self.syncer.trainer_version(url, as_version(data.get("policy_version")))
        return url, version, parse_choices(url, data, req)

    def _check_versions(self, versions: dict[str, int]) -> int:
        """The oldest of the versions the servers reported; ServerError if they differ in sync mode
        or one lags more than `max_lag`."""
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

    # -- weights, metrics, end ----------------------------------------------------------------
    def sync_weights(self, version: int) -> None:
        """Write the actor's weights as policy version `version`, have every server load them, and
        check every server reports that version."""
        self.syncer.sync(version)

    def counters(self) -> dict[str, float]:
        """So far in the run (a step's count would blink): `rollout/server/<name>` metrics."""
        return {"restarts": float(self.keeper.restarts), **self.router.counters()}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
        self.keeper.stop()

    # -- the parts' state, read where the run is assembled and in tests ---------------------------
    @property
    def version(self) -> int:
        """The trainer's policy version: the last synced."""
        return self.syncer.version

    @property
    def child(self) -> Any:
        """The server process this engine owns, or None."""
        return self.keeper.child

    @property
    def restarts(self) -> int:
        return self.keeper.restarts

    @property
    def offset(self) -> dict[str, int]:
        """Per server: its version minus the trainer's."""
        return self.syncer.offset

    @property
    def stale(self) -> set[str]:
        """Servers that missed a weight sync."""
        return self.router.stale

    @property
    def completed(self) -> dict[str, int]:
        """Requests answered, per server."""
        return self.router.completed

    @property
    def down_retry_s(self) -> float:
        """How long a server marked down is left alone before it is tried again."""
        return self.router.down_retry_s

    @down_retry_s.setter
    def down_retry_s(self, seconds: float) -> None:
        self.router.down_retry_s = seconds


def _client(cfg: ServerConfig, api_key: str | None) -> httpx.Client:
    """The HTTP client of every request to the servers: health, models, completions, weight loads
    and model info, each with the servers' key (None = `cfg.api_key`)."""
    return httpx.Client(
        timeout=httpx.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, 10.0)),
        headers=auth_headers(cfg.api_key if api_key is None else api_key),
    )
