"""The gateway: an OpenAI-compatible chat server in front of the run's rollout engine, in the
trainer's process, that records every episode's exact trajectory.

    gateway = Gateway(engine, template, limits)              # bound to 127.0.0.1:<random port>
    gateway.start(create_app(gateway))                       # serving (gateway.app: the routes)
    episode = gateway.open(episode_id, params)               # before the agent's first call
    client = openai.OpenAI(base_url=gateway.base_url(episode_id), api_key=episode.key)
    ...the agent calls client.chat.completions.create(...)...
    trajectory = gateway.close_episode(episode_id)           # its sample; later calls are refused
    gateway.drain()                                          # no engine call left running
    gateway.close()

It serves on loopback only, from uvicorn on a thread of its own, with a body limit
(`servers.guard.Guard`: over `max_body` is a 413) and **a key per episode**: `open` draws a fresh
random key, and an episode's routes answer only a request that carries it (none: 401; another
episode's key, or an episode that ended: 404, the same answer), so one agent cannot write into a
sibling's trajectory even if it learns or guesses the sibling's id. The routes are `gateway.app`
(one per `gateway.dialects` entry); a call's path through them is `gateway.calls`; the recording is
`gateway.trajectory`; engine calls go through `gateway.engine_runner`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from turnrl.agent.gateway.engine_runner import EngineRunner
from turnrl.agent.gateway.trajectory import EpisodeLimits, Trajectory, message_end, renders_tools
from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import RolloutEngine, SamplingParams
from turnrl.servers.chat.template import ChatTemplate
from turnrl.servers.listen import bind, url_of

log = logging.getLogger(__name__)

MODEL_ID = "policy"
"""The model name the gateway serves: what `run(client, model, row)` receives as `model`."""
STARTUP_TIMEOUT_S = 30.0


class GatewayError(TurnrlInputError):
    """The gateway cannot serve this model or template; the message says why, in one line."""


@dataclass
class OpenEpisode:
    """An episode the gateway serves: its trajectory, its sampling parameters, its calls in flight."""

    trajectory: Trajectory
    params: SamplingParams
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One call at a time (taken on the gateway's event loop)."""
    key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    """The episode's own key: its agent's client sends it; no other episode's key opens its routes."""
    sampling_overridden: int = 0
    """Calls that asked for other sampling parameters than the run's."""
    closed: bool = False
    _inflight: set[threading.Event] = field(default_factory=set)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def start_call(self, gone: threading.Event) -> bool:
        """Register a call about to run; False if the episode has ended."""
        with self._mutex:
            if self.closed:
                return False
            self._inflight.add(gone)
            return True

    def end_call(self, gone: threading.Event) -> None:
        with self._mutex:
            self._inflight.discard(gone)

    def close(self) -> None:
        """No call is recorded after this; the running ones are stopped (dropped or aborted)."""
        with self._mutex:
            self.closed = True
            for gone in self._inflight:
                gone.set()
        self.trajectory.close()


class Gateway:
    """See the module docstring. `template`: the chat template calls are rendered with (its
    tokenizer is the run's); `limits`: each episode's (`trajectory.EpisodeLimits`)."""

    def __init__(
        self,
        engine: RolloutEngine,
        template: ChatTemplate,
        limits: EpisodeLimits,
        max_concurrency: int = 64,
        max_body: int = 32 << 20,
        tool_call_format: str = "auto",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.template, self.tokenizer, self.limits = template, template.tokenizer, limits
        self.tool_format = template.tool_call_format(tool_call_format)
        """The format the model's tool calls are read in (`servers.chat.tool_calls.FORMATS`)."""
        self.model_id = MODEL_ID
        self.max_body = max_body
        self.eos_ids = set(engine.eos_ids)
        try:
            self.end = message_end(template)
        except ValueError as err:
            raise GatewayError(
                f"rollout.agent: {err}; set rollout.agent.chat_template to one that does not"
            ) from None
        self.renders_tools = renders_tools(template)
        self.tokenizer_lock = threading.Lock()  # a fast tokenizer is not safe from two threads at once
        self._episodes: dict[str, OpenEpisode] = {}
        self._lock = threading.Lock()
        self.engine_errors: list[str] = []
        self.runner = EngineRunner(engine, max_concurrency)
        self.sock = bind(host, port)  # loopback by default; `turnrl live serve` names its own
        self.url = url_of(self.sock)
        self.server: Any = None  # uvicorn's, once `start` serves
        self.thread: threading.Thread | None = None

    def start(self, app: Any) -> Gateway:
        """Serve `app` (`gateway.app.create_app(self)`: the routes live there, the state here) on
        the bound socket, from a thread of its own; returns once it answers."""
        import uvicorn

        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            limit_concurrency=None,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="turnrl-gateway", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise GatewayError(f"rollout.agent: the gateway did not start within {STARTUP_TIMEOUT_S:g}s")
            time.sleep(0.01)

    # -- episodes ---------------------------------------------------------------------------------
    def base_url(self, episode_id: str) -> str:
        return f"{self.url}/episodes/{episode_id}/v1"

    def open(self, episode_id: str, params: SamplingParams) -> OpenEpisode:
        """Serve `episode_id`, sampling with `params`; its response budget is `params.max_new_tokens`
        (a step's `data.max_response_length`)."""
        limits = replace(self.limits, max_response_tokens=params.max_new_tokens)
        episode = OpenEpisode(Trajectory(self.template, limits, self.eos_ids, self.end), params)
        with self._lock:
            if episode_id in self._episodes:
                raise ValueError(f"episode {episode_id!r} is already open")
            self._episodes[episode_id] = episode
        return episode

    def key_of(self, episode_id: str) -> str:
        """The key the episode's agent sends (KeyError: not open)."""
        with self._lock:
            return self._episodes[episode_id].key

    def episode(self, episode_id: str) -> OpenEpisode | None:
        with self._lock:
            return self._episodes.get(episode_id)

    def close_episode(self, episode_id: str) -> OpenEpisode:
        """End the episode: later calls get a 404, running ones stop, nothing more is recorded."""
        with self._lock:
            episode = self._episodes.pop(episode_id)
        episode.close()
        return episode

    def engine_failed(self, err: BaseException) -> None:
        self.engine_errors.append(f"{type(err).__name__}: {' '.join(str(err).split())}")

    def drain(self, timeout_s: float = 60.0) -> None:
        """Return once no engine call of a closed episode is still running (the trainer is about to
        change the weights the engine samples from)."""
        if not self.runner.drain(timeout_s):
            log.warning("agent gateway: engine calls still running %gs after their episodes ended", timeout_s)

    def close(self) -> None:
        """Stop serving and stop the engine worker; safe to call twice."""
        with self._lock:
            episodes = list(self._episodes.values())
            self._episodes.clear()
        for episode in episodes:
            episode.close()
        if self.server is not None and self.thread is not None:  # started
            self.server.should_exit = True
            if self.thread.is_alive():
                self.thread.join(timeout=10)
        self.runner.close()
        self.sock.close()
