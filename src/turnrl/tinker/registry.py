"""Who holds what on a `turnrl tinker serve` server: sessions, training clients and sampling
sessions, under the ids the tinker SDK sends back to us.

The ids follow the SDK's own arithmetic, because the SDK computes some of them itself: a training
client's model id is `<session>:train:<model_seq_id>` (`create_training_client_from_state` builds it
client-side and never asks), a sampling session's `<session>:sample:<sampling_session_seq_id>`.

The routes register entries on the event loop while the worker thread creates and drops the
adapters behind them, so every table is read and written under one lock. Nothing here touches
torch: an entry names its adapter (`backbone.Backbone`), the worker owns the tensors.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
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
    """Set by `ServiceClient.close()`: its clients are gone, a heartbeat is told 410."""


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

    def __init__(self, max_models: int = 16, max_samplers: int = 64) -> None:
        self.max_models, self.max_samplers = max_models, max_samplers
        self.lock = threading.Lock()
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        # least recently used first: the one evicted when a new sampler would exceed the bound
        self.samplers: OrderedDict[str, Sampler] = OrderedDict()
        self._adapters = 0

    # -- sessions ---------------------------------------------------------------------------------

    def new_session(self, sdk_version: str) -> Session:
        session = Session(str(uuid.uuid4()), sdk_version)
        with self.lock:
            self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str, field_name: str = "session_id") -> Session:
        """The live session, or 404 (unknown) / 410 (finished: the SDK stops its heartbeat on 410)."""
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise Refusal(f"{field_name}: unknown session {session_id!r} (sessions end when the server restarts)", 404)  # fmt: skip
        if session.finished:
            raise Refusal(f"{field_name}: session {session_id!r} has finished", 410)
        return session

    def finish_session(self, session_id: str) -> tuple[list[TrainingModel], list[Sampler]]:
        """Mark the session finished and take its models and samplers out (the caller frees their
        adapters on the worker)."""
        session = self.session(session_id)
        with self.lock:
            session.finished = True
            models = [m for m in self.models.values() if m.session_id == session_id]
            samplers = [s for s in self.samplers.values() if s.session_id == session_id]
            for m in models:
                del self.models[m.model_id]
            for s in samplers:
                del self.samplers[s.sampler_id]
        return models, samplers

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
        if model is None:
            raise Refusal(f"model_id: unknown training client {model_id!r}", 404)
        return model

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
        if sampler is None:
            raise Refusal(
                f"{field_name}: unknown sampling session {sampler_id!r} (at most {self.max_samplers} are "
                f"kept, the least recently used dropped first: --max-samplers)",
                404,
            )
        return sampler
