"""Who holds what on a `turnrl tinker serve` server: sessions, training clients and sampling
sessions, under the ids the tinker SDK sends back to us.

The ids follow the SDK's own arithmetic, because the SDK computes some of them itself: a training
client's model id is `<session>:train:<model_seq_id>` (`create_training_client_from_state` builds it
client-side and never asks), a sampling session's `<session>:sample:<sampling_session_seq_id>`.

The routes register entries on the event loop while the worker thread creates and drops the
adapters behind them, so every table is read and written under one lock. Nothing here touches
torch: an entry names its adapter (`backbone.Backbone`), the worker owns the tensors.

A session lives until its client finishes it (`ServiceClient.close()`) or goes quiet: the SDK sends
a heartbeat every 10 s, and every request of its clients counts too, so a session unheard of for
`session_timeout_s` has lost its client and `expire` ends it. An ended session's clients and
samplers are taken out at once (their queued work is then dropped when it comes up: the service
asks `ended` before running it); the session itself is remembered, up to `max_sessions` of them,
so its heartbeat and its clients' requests are told why it is gone.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from turnrl.servers.refusal import Refusal


@dataclass(frozen=True)
class LoraSpec:
    """What the SDK's `LoraConfig` asked for; the server turns it into peft's config."""

    rank: int
    seed: int | None = None
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "seed": self.seed,
            "train_attn": self.train_attn,
            "train_mlp": self.train_mlp,
            "train_unembed": self.train_unembed,
        }


@dataclass
class Session:
    session_id: str
    sdk_version: str
    finished: bool = False
    """Set by `ServiceClient.close()` or by expiry: its clients are gone, a heartbeat is told 410."""
    ended: str = ""
    """Why it finished, as a refusal says it ('was closed ...', 'expired ...')."""
    last_seen: float = field(default_factory=time.monotonic)
    """When its heartbeat or one of its clients' requests last arrived."""


@dataclass
class TrainingModel:
    """One training client: a LoRA adapter on the shared base and its own AdamW state."""

    model_id: str
    session_id: str
    base_model: str
    adapter: str
    """The peft adapter name (`backbone`); peft names cannot hold the ':' of a model id."""
    user_metadata: dict[str, Any] | None = None
    lora: LoraSpec | None = None
    """None until the worker has made the adapter (a client made from a checkpoint takes the
    checkpoint's settings)."""
    optimizer: Any = None
    """torch.optim.AdamW over the adapter's parameters; set by the worker when the adapter exists."""
    ready: bool = False
    """False until the worker has created the adapter (requests queued behind creation still run)."""
    steps: int = 0


@dataclass
class Sampler:
    """One sampling session: a frozen snapshot adapter, or the bare base model (`adapter` None)."""

    sampler_id: str
    session_id: str
    base_model: str
    adapter: str | None
    model_path: str | None = None


class Registry:
    """Sessions, training models and samplers by id; see the module docstring."""

    def __init__(
        self,
        max_models: int = 16,
        max_samplers: int = 64,
        max_sessions: int = 256,
        session_timeout_s: float = 300.0,
    ) -> None:
        self.max_models, self.max_samplers = max_models, max_samplers
        self.max_sessions, self.session_timeout_s = max_sessions, session_timeout_s
        self.lock = threading.Lock()
        self.sessions: dict[str, Session] = {}
        self._ended: deque[str] = deque()  # ended sessions still remembered, oldest first
        self.models: dict[str, TrainingModel] = {}
        # least recently used first: the one evicted when a new sampler would exceed the bound
        self.samplers: OrderedDict[str, Sampler] = OrderedDict()
        self._adapters = 0

    # -- sessions ---------------------------------------------------------------------------------

    def new_session(self, sdk_version: str) -> Session:
        session = Session(str(uuid.uuid4()), sdk_version)
        with self.lock:
            live = sum(not s.finished for s in self.sessions.values())
            if live >= self.max_sessions:
                raise Refusal(
                    f"sessions: this server holds at most {self.max_sessions} at once (--max-sessions); "
                    f"close a ServiceClient, or wait for an idle one to expire (--session-timeout-s "
                    f"{self.session_timeout_s:g})"
                )
            self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str, field_name: str = "session_id") -> Session:
        """The live session, seen now; or 404 (unknown) / 410 (ended: the SDK stops its heartbeat on 410)."""
        with self.lock:
            session = self.sessions.get(session_id)
            if session is not None and not session.finished:
                session.last_seen = time.monotonic()
        if session is None:
            raise Refusal(f"{field_name}: unknown session {short_id(session_id)} (sessions end when the server restarts)", 404)  # fmt: skip
        if session.finished:
            raise Refusal(f"{field_name}: session {session_id!r} {session.ended}", 410)
        return session

    def ended(self, session_id: str | None) -> str | None:
        """Why the session has ended (None while it lives, or for work of no session)."""
        if session_id is None:
            return None
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            return "is unknown"
        return session.ended if session.finished else None

    def _seen(self, session_id: str) -> None:
        """Under the lock: a request of one of the session's clients arrived."""
        session = self.sessions.get(session_id)
        if session is not None and not session.finished:
            session.last_seen = time.monotonic()

    def _end(self, session: Session, why: str) -> tuple[list[TrainingModel], list[Sampler]]:
        """Under the lock: mark `session` ended and take its models and samplers out (the caller
        frees their adapters on the worker); forget the oldest ended sessions beyond `max_sessions`."""
        session.finished, session.ended = True, why
        sid = session.session_id
        models = [m for m in self.models.values() if m.session_id == sid]
        samplers = [s for s in self.samplers.values() if s.session_id == sid]
        for m in models:
            del self.models[m.model_id]
        for s in samplers:
            del self.samplers[s.sampler_id]
        self._ended.append(sid)
        while len(self._ended) > self.max_sessions:
            self.sessions.pop(self._ended.popleft(), None)
        return models, samplers

    def finish_session(self, session_id: str) -> tuple[list[TrainingModel], list[Sampler]]:
        """`ServiceClient.close()`: end the session; its models and samplers, for the caller to free."""
        session = self.session(session_id)
        with self.lock:
            if session.finished:  # expired meanwhile: already taken out
                return [], []
            return self._end(session, "has finished")

    def expire(self, now: float) -> tuple[list[TrainingModel], list[Sampler]]:
        """End every live session unheard of for longer than `session_timeout_s`; their models and
        samplers, for the caller to free."""
        models: list[TrainingModel] = []
        samplers: list[Sampler] = []
        with self.lock:
            for session in list(self.sessions.values()):
                if not session.finished and now - session.last_seen > self.session_timeout_s:
                    why = f"has expired: no heartbeat or request for {self.session_timeout_s:g} s (--session-timeout-s)"  # fmt: skip
                    m, s = self._end(session, why)
                    models += m
                    samplers += s
        return models, samplers

    def live_sessions(self) -> int:
        with self.lock:
            return sum(not s.finished for s in self.sessions.values())

    # -- training models --------------------------------------------------------------------------

    def adapter_name(self, prefix: str) -> str:
        with self.lock:
            self._adapters += 1
            return f"{prefix}{self._adapters}"

    def add_model(self, model: TrainingModel) -> None:
        with self.lock:
            if model.model_id in self.models:
                raise Refusal(f"model_seq_id: this session already has training client {model.model_id!r}")
            if len(self.models) >= self.max_models:
                raise Refusal(
                    f"training clients: this server holds at most {self.max_models} at once "
                    f"(--max-training-clients); close a ServiceClient to free its clients"
                )
            self.models[model.model_id] = model

    def model(self, model_id: str) -> TrainingModel:
        with self.lock:
            model = self.models.get(model_id)
            if model is not None:
                self._seen(model.session_id)
        if model is None:
            raise Refusal(f"model_id: {self._gone('training client', model_id)}", 404)
        return model

    def _gone(self, what: str, client_id: str) -> str:
        """Why a client id is not here: its session ended, or it was never made."""
        session_id = client_id.split(":", 1)[0]
        with self.lock:
            session = self.sessions.get(session_id)
        if session is not None and session.finished:
            return f"{what} {short_id(client_id)} is gone: its session {session.ended}"
        return f"unknown {what} {short_id(client_id)}"

    def drop_model(self, model_id: str) -> TrainingModel | None:
        with self.lock:
            return self.models.pop(model_id, None)

    def run_ids(self) -> set[str]:
        with self.lock:
            return set(self.models)

    # -- samplers ---------------------------------------------------------------------------------

    def add_sampler(self, sampler: Sampler) -> list[Sampler]:
        """Register `sampler`; returns the least recently used ones it pushed out (their adapters
        are the caller's to free)."""
        with self.lock:
            self.samplers[sampler.sampler_id] = sampler
            self.samplers.move_to_end(sampler.sampler_id)
            evicted = []
            while len(self.samplers) > self.max_samplers:
                evicted.append(self.samplers.popitem(last=False)[1])
            return evicted

    def sampler(self, sampler_id: str, field_name: str = "sampling_session_id") -> Sampler:
        with self.lock:
            sampler = self.samplers.get(sampler_id)
            if sampler is not None:
                self.samplers.move_to_end(sampler_id)  # the most recently used now
                self._seen(sampler.session_id)
        if sampler is None:
            gone = self._gone("sampling session", sampler_id)
            if gone.startswith("unknown"):
                gone += f" (at most {self.max_samplers} are kept, the least recently used dropped first: --max-samplers)"  # fmt: skip
            raise Refusal(f"{field_name}: {gone}", 404)
        return sampler


def short_id(value: str, limit: int = 120) -> str:
    """An id as a refusal quotes it: `repr`, cut (an id is bounded, but need not be short)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
