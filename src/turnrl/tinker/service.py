"""The state behind `turnrl tinker serve`'s routes: the base model and its adapters, who holds them,
the futures, and the one worker thread every model computation runs on.

One worker, because every training client and sampler shares one base model (`backbone`): its
requests run in the order they arrived (sample requests that wait together excepted: they run as one
engine call, after all the other work sent before them, `sample_batch`), which is also the order the SDK sends a
client's requests in (it waits for each submission's answer before sending the next, and this
server asks it to send a batch's chunks one after another, `parallel_fwdbwd_chunks` false). So a
client's `forward_backward`, `optim_step` and `save_state` apply in its own order, and nothing on
the event loop ever waits for torch.

A route checks its request, registers what it creates, and hands the work to `submit`, which answers
with the future's id at once; `call` is for the few routes whose answer is the work itself.

Bounds: at most `max_waiting` requests wait for the worker at once (not counting the one it runs);
one more is answered 503 with Retry-After, which the SDK retries after a pause, so the work queued
(and the bodies it holds) stays bounded. Each queued request belongs to its client's session, and a
session that has ended by the time the request comes up (closed, or expired: `Registry.expire`) has
it dropped unrun, its future failed with one line saying why. Expiry needs no timer: every route
passes `service_of`, and every job start, which end the sessions gone quiet.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from turnrl.rollout.hf import HFEngine
from turnrl.servers.refusal import Refusal
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.checkpoints import StateRoot
from turnrl.tinker.futures import FutureStore
from turnrl.tinker.registry import Registry, Sampler, TrainingModel
from turnrl.tinker.sample_batch import Pending, run_pending
from turnrl.tinker.sampling import SampleLimits, SamplePlan

log = logging.getLogger("turnrl.tinker")


@dataclass(frozen=True)
class ServiceLimits:
    max_training_clients: int = 16
    max_samplers: int = 64
    max_futures: int = 4096
    future_ttl_s: float = 3600.0
    max_body: int = 64 << 20
    sample: SampleLimits = field(default_factory=SampleLimits)
    poll_wait_s: float = 10.0
    """How long a retrieve_future waits for an unfinished job before answering 'try again'."""
    max_waiting: int = 256
    """Requests waiting for the worker at once; one more is a 503 with Retry-After."""
    max_sessions: int = 256
    """Live sessions (ServiceClients) at once."""
    session_timeout_s: float = 300.0
    """A session with no heartbeat and no request for this long has lost its client and ends."""


class Busy(Refusal):
    """`max_waiting` requests already wait for the worker: a 503 with Retry-After (`app`)."""

    default_status = 503


class TinkerService:
    """See the module docstring."""

    def __init__(
        self, backbone: Backbone, state_root: StateRoot, limits: ServiceLimits | None = None
    ) -> None:
        self.limits = limits or ServiceLimits()
        self.backbone, self.root = backbone, state_root
        limits = self.limits
        self.registry = Registry(
            limits.max_training_clients, limits.max_samplers, limits.max_sessions, limits.session_timeout_s
        )
        self.futures = FutureStore(limits.max_futures, limits.future_ttl_s)
        self.worker = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="tinker-worker", initializer=self._on_worker
        )
        self.engine = HFEngine(backbone.model, backbone.tokenizer)
        self._lock = threading.Lock()
        self.waiting = 0
        """Requests queued for the worker and not started yet."""
        self.dropped = 0
        """Requests dropped unrun: their session had ended by the time they came up."""
        self.refused_busy = 0
        self.jobs_submitted = 0
        """Non-sample jobs put on the worker so far (a sample's barrier, `sample_batch`)."""
        self.jobs_done = 0
        self.pending: list[Pending] = []
        """Sample jobs queued for the next drain."""
        self.sample_calls = 0
        """Engine calls that answered sample requests, and the requests they answered."""
        self.samples_answered = 0
        self._worker_thread: int | None = None
        self._last_sweep = 0.0

    def _on_worker(self) -> None:
        self._worker_thread = threading.get_ident()

    @property
    def base_models(self) -> list[str]:
        return [self.backbone.name]

    def check_base_model(self, name: str, field: str = "base_model") -> None:
        if name not in self.base_models:
            served = ", ".join(repr(m) for m in self.base_models)
            raise Refusal(f"{field}: {name!r} is not served here; this server serves {served}", 404)

    # -- running work -----------------------------------------------------------------------------

    def submit(self, kind: str, work: Callable[[], Any], session: str | None) -> str:
        """Queue `work` of `session`'s client on the worker; the id of the future the SDK will
        poll. 503 (`Busy`) when `max_waiting` requests already wait, 429 when the futures are full."""
        self._admit()
        return self.futures.add(kind, self._submit_job(kind, work, session))

    def submit_sample(self, sampler_id: str, plan: SamplePlan, session: str) -> str:
        """Queue a sample job for the next drain (`sample_batch`); the id of its future."""
        self._admit()
        future: Future = Future()
        with self._lock:  # the barrier and the drain's place in the queue agree
            self.pending.append(Pending(sampler_id, plan, session, self.jobs_submitted, future))
            self.worker.submit(self._drain)
        return self.futures.add("sample", future)

    def _drain(self) -> None:
        """On the worker: the queued sample jobs whose earlier work has all run, batched."""
        with self._lock:
            take = [p for p in self.pending if p.barrier <= self.jobs_done]
            self.pending = [p for p in self.pending if p.barrier > self.jobs_done]
            self.waiting -= len(take)
        if take:
            self.expire_idle()
            run_pending(self, take)

    def count_samples(self, requests: int) -> None:
        with self._lock:
            self.sample_calls += 1
            self.samples_answered += requests

    def _submit_job(self, kind: str, work: Callable[[], Any], session: str | None) -> Future:
        with self._lock:  # counted and queued together: a sample's barrier is exact
            self.jobs_submitted += 1
            return self.worker.submit(self._run, kind, work, session)

    async def call(self, work: Callable[[], Any], session: str | None = None, bounded: bool = True) -> Any:
        """Run `work` on the worker and wait for it (a Refusal it raises reaches the route).
        `bounded=False`: not refused when the queue is full (freeing adapters must not be)."""
        self._enqueue(bounded)
        return await asyncio.wrap_future(self._submit_job("call", work, session))

    def _admit(self) -> None:
        """Room for one more request with a future: in the queue (503) and among the futures (429)."""
        self._enqueue()
        try:
            self.futures.reserve()
        except Refusal:
            self._started()
            raise

    def _enqueue(self, bounded: bool = True) -> None:
        """Count one more request waiting for the worker, or refuse it (503) when the queue is full."""
        with self._lock:
            if bounded and self.waiting >= self.limits.max_waiting:
                self.refused_busy += 1
                raise Busy(
                    f"request: {self.waiting} requests already wait for the model on this server "
                    f"(--max-waiting {self.limits.max_waiting}); retry later"
                )
            self.waiting += 1

    def _started(self) -> None:
        with self._lock:
            self.waiting -= 1

    def _run(self, kind: str, work: Callable[[], Any], session: str | None) -> Any:
        self._started()
        try:
            self.expire_idle()
            self.check_session(session)
            return work()
        except Refusal:
            raise
        except Exception:
            log.exception("tinker %s failed", kind)
            raise
        finally:
            with self._lock:
                self.jobs_done += 1

    def check_session(self, session: str | None) -> None:
        """A Refusal (and one more dropped request) when `session` has ended since the request came."""
        why = self.registry.ended(session)
        if why is not None:
            with self._lock:
                self.dropped += 1
            raise Refusal(f"session: {session!r} {why}; this request was dropped before it ran")

    def expire_idle(self) -> None:
        """End the sessions gone quiet (at most once a second) and free their adapters: at once on
        the worker, queued to it from anywhere else."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_sweep < 1.0:
                return
            self._last_sweep = now
        models, samplers = self.registry.expire(now)
        if not (models or samplers):
            return
        log.warning("tinker: %d training client(s) and %d sampler(s) of idle sessions freed", len(models), len(samplers))  # fmt: skip
        if threading.get_ident() == self._worker_thread:
            self.release(models, samplers)
        else:
            self._enqueue(bounded=False)
            self._submit_job("release", lambda: self.release(models, samplers), None)

    def close(self) -> None:
        self.worker.shutdown(wait=True, cancel_futures=True)

    # -- lookups the jobs make when they run (a client may have gone since its request was queued) --

    def ready_model(self, model_id: str) -> TrainingModel:
        model = self.registry.model(model_id)
        if not model.ready:
            raise Refusal(f"model_id: training client {model_id!r} was not created")
        return model

    def release(self, models: list[TrainingModel], samplers: list[Sampler]) -> None:
        """On the worker: free the adapters of clients and samplers taken out of the registry."""
        for model in models:
            self.backbone.remove_adapter(model.adapter)
        for sampler in samplers:
            if sampler.adapter is not None:
                self.backbone.remove_adapter(sampler.adapter)

    def add_sampler(self, sampler: Sampler) -> None:
        """On the worker: register a sampler whose adapter exists; free those it pushes out (and
        one it replaces under the same id)."""
        with self.registry.lock:
            replaced = self.registry.samplers.get(sampler.sampler_id)
        self.release([], [*self.registry.add_sampler(sampler), *([replaced] if replaced else [])])


def service_of(request: Request) -> TinkerService:
    """The service, once the sessions gone quiet are ended: every route passes here, so expiry
    needs no timer of its own."""
    service: TinkerService = request.app.state.tinker
    service.expire_idle()
    return service
