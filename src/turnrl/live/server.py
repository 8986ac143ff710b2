"""The live server's state: the gateway that serves and records, the session store, the clients.

    server = LiveServer(engine, template, limits, keys, params, store, score_fn, host, port)
    server.start(create_app(server))   # serving at server.url; an idle timer closes sessions left open
    ...
    server.close()          # open sessions end (`shutdown`) and are recorded: they can still be rewarded

A session's calls are recorded by the agent gateway's own machinery (`agent.gateway`): the same
exact token ids, masks, log-probs and versions, the same drift rule, the same limits.
"""

from __future__ import annotations

import hmac
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.agent.gateway.trajectory import EpisodeLimits
from turnrl.live.keys import Client
from turnrl.live.rows import prompt_key, sample_record
from turnrl.live.store import Session, SessionStore
from turnrl.rollout.base import RolloutEngine, SamplingParams
from turnrl.servers.chat.template import ChatTemplate

log = logging.getLogger(__name__)

ScoreFn = Callable[[list[dict[str, Any]], str], Any]


class LiveServer:
    """See the module docstring."""

    def __init__(
        self,
        engine: RolloutEngine,
        template: ChatTemplate,
        limits: EpisodeLimits,
        keys: dict[bytes, Client],
        params: SamplingParams,
        store: SessionStore,
        score_fn: ScoreFn | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.engine, self.keys, self.params, self.store, self.score_fn = engine, keys, params, store, score_fn
        self.gateway = Gateway(engine, template, limits, host=host, port=port)
        self.url = self.gateway.url
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._expire_loop, name="turnrl-live-timer", daemon=True)

    def start(self, app: Any) -> LiveServer:
        """Serve `app` (`live.app.create_app(self)`: the routes live there, the state here)."""
        self.gateway.start(app)
        self._timer.start()
        return self

    def client_of(self, presented: bytes | None) -> Client | None:
        """The client whose key was presented (every key compared: the time tells nothing)."""
        found = None
        for key, client in self.keys.items():
            if presented is not None and hmac.compare_digest(presented, key):
                found = client
        return found

    @property
    def policy_version(self) -> int:
        return int(getattr(self.engine, "version", 0))

    # -- sessions -----------------------------------------------------------------------------------
    def open_episode(self, sid: str) -> OpenEpisode:
        return self.gateway.open(sid, self.params)

    def end(self, s: Session, why: str) -> None:
        """End an open session: its recording closed and written to the store, then scored by the
        server's own function if it has one."""
        if s.state != "open":
            return
        self.gateway.close_episode(s.id)
        traj = s.handle.trajectory
        samples = [sample_record(e) for e in traj.samples]
        record = {
            "samples": samples,
            "prompt_key": prompt_key(samples[0]["prompt"]) if samples else "",
            "calls": traj.calls,
        }
        self.store.close(s, record, why)
        if self.score_fn is not None and s.state == "ended":
            self._score(s, list(traj.expected))

    def _score(self, s: Session, messages: list[dict[str, Any]]) -> None:
        assert self.score_fn is not None
        try:
            value = self.score_fn(messages, s.task)
        except Exception as err:  # the clients may still reward it
            self.store.counts["score_fn_errors"] += 1
            log.warning("live.score_fn raised on session %r: %s: %s", s.id, type(err).__name__, err)
            return
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.store.counts["score_fn_errors"] += 1
            log.warning("live.score_fn returned %r for session %r: not a finite number", value, s.id)
            return
        self.store.reward(s, float(value))

    def _expire_loop(self) -> None:
        while not self._stop.wait(1.0):
            for s in self.store.expired():
                try:
                    self.end(s, "idle")
                except Exception:  # the timer must outlive one bad session
                    log.exception("live: closing idle session %r failed", s.id)

    def close(self) -> None:
        """Stop serving: open sessions end as `shutdown` and are recorded (rewardable after a restart)."""
        self._stop.set()
        for s in [s for s in list(self.store.sessions.values()) if s.state == "open"]:
            try:
                self.end(s, "shutdown")
            except Exception:
                log.exception("live: recording session %r at shutdown failed", s.id)
        self.gateway.close()
