"""What an inference server is: whether it answers, which model it serves under which limits, and
which policy version it holds."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from turnrl.config.schema import ServerConfig
from turnrl.rollout.server.wire import ServerError, as_version, response_detail

log = logging.getLogger(__name__)

VERSION_ROUTES = (("/health", "policy_version"), ("/model_info", "weight_version"),
                  ("/get_model_info", "weight_version"))  # fmt: skip
"""Where a server reports its policy version: turnrl's /health, else SGLang's (get_)model_info."""


@dataclass
class ServerCard:
    """A server as it presented itself at start-up."""

    model_id: str
    """The model id to put in its requests."""
    limits: dict[str, int] | None
    """The "limits" its /health advertises (turnrl serve's; vLLM and SGLang advertise none)."""


class ServerProbe:
    """Asks servers what they are: waits for a server to answer, checks that it serves the
    trainer's model, and reads the policy version it holds. It keeps no state of its own."""

    def __init__(self, client: httpx.Client, cfg: ServerConfig, vocab_size: int) -> None:
        self.client, self.cfg, self.vocab_size = client, cfg, vocab_size

    def connect(self, url: str, model_name: str | None) -> ServerCard:
        """Wait for `url`, check it serves the trainer's model (of id `model_name` if given)."""
        health = self._wait_healthy(url)
        card = self._model_card(url)
        model_id = str(card.get("id"))
        health = health if isinstance(health, dict) else {}
        self._check_model(url, model_id, health.get("vocab_size", card.get("vocab_size")), model_name)
        limits = health.get("limits")
        if not isinstance(limits, dict):
            return ServerCard(model_id, None)
        return ServerCard(model_id, {k: v for k, v in limits.items() if isinstance(v, int) and v > 0})

    def version(self, url: str) -> int | None:
        """The policy version `url` reports, in its own numbering; None if it reports none."""
        for path, key in VERSION_ROUTES:
            try:
                r = self.client.get(url + path, timeout=10.0)
                value = r.json().get(key) if r.status_code == 200 and r.content.strip() else None
            except (httpx.HTTPError, ValueError, AttributeError):
                value = None
            if as_version(value) is not None:
                return as_version(value)
        return None

    def _wait_healthy(self, url: str) -> Any:
        """`url`'s /health answer, polled until it is 200 or `startup_timeout_s` has passed."""
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while True:
            r: httpx.Response | None
            try:
                r = self.client.get(f"{url}/health", timeout=5.0)
                if r.status_code == 200:
                    return r.json() if r.content.strip() else {}
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

    def _model_card(self, url: str) -> dict[str, Any]:
        """The first model `url`/v1/models lists."""
        try:
            r = self.client.get(f"{url}/v1/models", timeout=10.0)
            cards = r.json()["data"] if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            cards = None
        if not cards:
            raise ServerError(f"{url}/v1/models lists no model; is it an OpenAI-compatible server?")
        return cards[0]

    def _check_model(self, url: str, model_id: str, vocab: Any, model_name: str | None) -> None:
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
