"""Weight sync: the actor's weights written as a policy version's directory, loaded by every server,
and each server's version checked."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from turnrl.config.schema import ServerConfig
from turnrl.rollout.server.keeper import ChildKeeper
from turnrl.rollout.server.probe import ServerProbe
from turnrl.rollout.server.router import ServerRouter
from turnrl.rollout.server.wire import ServerError, ServerUnreachable, as_version, response_detail

log = logging.getLogger(__name__)


@dataclass
class WeightDirs:
    """Where the servers read the actor's weights: one directory per policy version under `root`,
    each a safetensors file and the model's `config.json`."""

    weights: Callable[[], dict[str, torch.Tensor]] | None
    """The actor's full HF-named state dict, read at each write."""
    root: Path | None
    model_config: Any
    """A transformers config or dict, written as `config.json`."""

    def write(self, version: int) -> Path:
        """Write the actor's weights as `version`'s directory."""
        from turnrl.models.weights_dir import write_weights_dir

        assert self.weights is not None and self.root is not None
        return write_weights_dir(self.weights(), self.root / f"v{version}", self.model_config)

    def current(self, version: int) -> Path:
        """The directory of `version`, the trainer's current one, written again if it is gone."""
        assert self.root is not None
        path = self.root / f"v{version}"
        return path if (path / "model.safetensors").is_file() else self.write(version)

    def prune(self, keep: Path) -> None:
        """Remove every version's directory but `keep`: every server holds it in memory now."""
        assert self.root is not None
        for old in self.root.glob("v*"):
            if old != keep and old.is_dir() and old.name[1:].isdigit():
                shutil.rmtree(old, ignore_errors=True)


class WeightSyncer:
    """Owns the trainer's policy `version` and each server's `offset` from it: writes the actor's
    weights for a version, has every server load them (the own child started again if it died
    meanwhile), marks the servers that missed it stale, and loads the current version into a stale
    server or a restarted child."""

    def __init__(
        self,
        client: httpx.Client,
        cfg: ServerConfig,
        dirs: WeightDirs,
        pool: ThreadPoolExecutor,
        probe: ServerProbe,
        router: ServerRouter,
        keeper: ChildKeeper,
    ) -> None:
        """`pool`, `probe`, `router`, `keeper`: the engine's, to load all servers at once, read
        their versions, mark those that missed a version, and restart the own child."""
        self.client, self.cfg, self.dirs, self.urls = client, cfg, dirs, router.urls
        self.pool, self.probe, self.router, self.keeper = pool, probe, router, keeper
        self.version = 0  # the trainer's; servers must report it once they can report anything
        self.offset = dict.fromkeys(self.urls, 0)
        """Per server: its version minus the trainer's (> 0 once a version was synced twice)."""

    def trainer_version(self, url: str, served: int | None) -> int | None:
        """A version `url` reported, in the trainer's numbering."""
        return None if served is None else served - self.offset[url]

    # -- a new version ------------------------------------------------------------------------
    def sync(self, version: int) -> None:
        """Write the actor's weights as policy version `version`, have every server load them, and
        check every server reports that version."""
        if self.dirs.weights is None or self.dirs.root is None:
            raise ServerError("this ServerEngine was built without the actor's weights: it cannot sync them")
        path = self.dirs.write(version)
        missed = self._load_everywhere(path, version)
        if len(missed) == len(self.urls):
            raise ServerError("; ".join(missed.values()))
        self.router.missed(set(missed))
        for url, why in missed.items():
            log.warning("inference server %s missed policy version %d; it serves nothing until it loads it: %s", url, version, why)  # fmt: skip
        self.version = version
        self.dirs.prune(path)

    def _load_everywhere(self, path: Path, version: int) -> dict[str, str]:
        """Load `path` into every server at once; the servers that did not answer, and why."""
        futures: list[Future[None]] = [self.pool.submit(self.load, u, path, version) for u in self.urls]
        missed: dict[str, str] = {}
        for url, fut in zip(self.urls, futures, strict=True):
            try:
                fut.result()
            except ServerUnreachable as err:  # an external server gone: it misses this version
                missed[url] = str(err)
        return missed

    # -- servers behind -----------------------------------------------------------------------
    def recover(self) -> None:
        """Stale servers whose down time is over: try to load the current weights into them."""
        if not self.version:
            return
        for url in self.router.due():
            try:
                self.load(url, self.dirs.current(self.version), self.version)
            except ServerError as err:
                self.router.still_down(url)
                log.warning("inference server %s still cannot take the current weights: %s", url, err)
                continue
            self.router.current(url)
            log.warning("inference server %s is back, at policy version %d", url, self.version)

    def reload(self, url: str) -> None:
        """`url` is the own child, started again: a fresh server at its own version 0, to be given
        the current weights."""
        self.offset[url] = 0
        if self.version:
            self.load(url, self.dirs.current(self.version), self.version, revive=False)
        self.router.up(url)

    # -- one server ---------------------------------------------------------------------------
    def load(self, url: str, path: Path, version: int, revive: bool = True) -> None:
        """Have `url` load `path` as `version` and check it reports it. `revive`: start the own child
        again if it died meanwhile (not from within a restart)."""
        r = self._post_load(url, path, version, revive)
        if r.status_code == 409:
            # turnrl serve takes only newer versions, and this server holds this one or a later one
            # already (a resume, an evaluation's version 0): load it as the server's next version,
            # and read that server's versions back through the new offset
            held = self.probe.version(url)
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
        self._check_loaded(
            url, version, as_version(answer.get("policy_version", answer.get("weight_version")))
        )

    def _check_loaded(self, url: str, version: int, reported: int | None) -> None:
        """`url` loaded `version`: what it `reported` then and what it reports now must both be it."""
        served = version + self.offset[url]
        now = self.probe.version(url)
        if reported not in (None, served) or now != served:
            wrong = now if reported in (None, served) else reported
            raise ServerError(
                f"{url} reports policy version {wrong} after loading version {served}: it would sample "
                f"with other weights than the trainer's"
            )

    def _post_load(self, url: str, path: Path, version: int, revive: bool) -> httpx.Response:
        # SGLang's field names only (turnrl serve reads them too): a stricter server could refuse others
        body = {"model_path": str(path.resolve()), "weight_version": str(version + self.offset[url])}
        last = "no attempt"
        for _ in range(self.cfg.max_retries + 1):
            try:
                return self.client.post(f"{url}/update_weights_from_disk", json=body)
            except httpx.TransportError as err:
                last = type(err).__name__
                if revive and self.keeper.dead(url):
                    # the own child died: start it again (it gets this version when it is current)
                    self.keeper.revive(url)
                    body["weight_version"] = str(version + self.offset[url])
        raise ServerUnreachable(
            f"inference server {url} unreachable while loading policy version {version}: {last} "
            f"after {self.cfg.max_retries + 1} attempts of rollout.server.timeout_s={self.cfg.timeout_s:g}s"
            f"{self.keeper.log_tail(url)}"
        )
