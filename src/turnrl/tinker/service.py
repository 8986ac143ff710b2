"""The state behind `turnrl tinker serve`'s routes: the base model and its adapters, who holds them,
the futures, and the one worker thread every model computation runs on.

One worker, because every training client and sampler shares one base model (`backbone`): its
requests run one at a time in the order they arrived, which is also the order the SDK sends a
client's requests in (it waits for each submission's answer before sending the next, and this
server asks it to send a batch's chunks one after another, `parallel_fwdbwd_chunks` false). So a
client's `forward_backward`, `optim_step` and `save_state` apply in its own order, and nothing on
the event loop ever waits for torch.

A route checks its request, registers what it creates, and hands the work to `submit`, which answers
with the future's id at once; `call` is for the few routes whose answer is the work itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from turnrl.rollout.hf import HFEngine
from turnrl.servers.refusal import Refusal
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.checkpoints import StateRoot
from turnrl.tinker.futures import FutureStore
from turnrl.tinker.registry import Registry, Sampler, TrainingModel
from turnrl.tinker.sampling import SampleLimits

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


class TinkerService:
    """See the module docstring."""

    def __init__(
        self, backbone: Backbone, state_root: StateRoot, limits: ServiceLimits | None = None
    ) -> None:
        self.limits = limits or ServiceLimits()
        self.backbone, self.root = backbone, state_root
        self.registry = Registry(self.limits.max_training_clients, self.limits.max_samplers)
        self.futures = FutureStore(self.limits.max_futures, self.limits.future_ttl_s)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-worker")
        self.engine = HFEngine(backbone.model, backbone.tokenizer)

    @property
    def base_models(self) -> list[str]:
        return [self.backbone.name]

    def check_base_model(self, name: str, field: str = "base_model") -> None:
        if name not in self.base_models:
            served = ", ".join(repr(m) for m in self.base_models)
            raise Refusal(f"{field}: {name!r} is not served here; this server serves {served}", 404)

    # -- running work -----------------------------------------------------------------------------

    def submit(self, kind: str, work: Callable[[], Any]) -> str:
        """Queue `work` on the worker; the id of the future the SDK will poll."""
        self.futures.reserve()
        return self.futures.add(kind, self.worker.submit(self._run, kind, work))

    async def call(self, work: Callable[[], Any]) -> Any:
        """Run `work` on the worker and wait for it (a Refusal it raises reaches the route)."""
        return await asyncio.wrap_future(self.worker.submit(work))

    @staticmethod
    def _run(kind: str, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except Refusal:
            raise
        except Exception:
            log.exception("tinker %s failed", kind)
            raise

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
    return request.app.state.tinker
