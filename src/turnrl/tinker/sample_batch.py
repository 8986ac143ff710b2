"""Sample requests that wait for the worker together run as one engine call.

tinker-cookbook's RL loop sends a step's samples as many concurrent `sample` requests (one per
prompt, or one per sample); run one at a time they leave the engine at batch 1. Instead a `sample`
route only queues its job (`TinkerService.submit_sample`) and puts one `drain` on the worker; the
first drain to run takes every queued job it may, groups them by `sampling.batch_key` (the adapter
and the sampling settings; a seeded job alone), and runs each group as one `sampling.sample_many`,
each job's future getting its own response.

Order: a drain takes only the jobs with no other work queued before them that has not run yet
(`Pending.barrier`, the count of non-sample jobs submitted before the job), so a sample still sees
every `save_weights_for_sampler`, `load_weights` or session change its client sent before it, exactly
as when each ran alone; samples reorder only among themselves, and they change no state. A group
that fails is run again job by job, so each request gets its own answer or its own error.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from turnrl.rollout.hf import HFEngine
from turnrl.servers.refusal import Refusal
from turnrl.tinker import sampling
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.registry import Registry

log = logging.getLogger("turnrl.tinker")


@dataclass
class Pending:
    sampler_id: str
    plan: sampling.SamplePlan
    session: str
    barrier: int
    """Non-sample jobs submitted to the worker before this one: it runs after they have."""
    future: Future


class SampleHost(Protocol):
    """What the batcher uses of the service (`TinkerService`), named here so that it imports nothing
    of the service that imports it."""

    backbone: Backbone
    engine: HFEngine
    registry: Registry

    def check_session(self, session: str | None) -> None: ...

    def count_samples(self, requests: int) -> None: ...


def run_pending(service: SampleHost, jobs: list[Pending]) -> None:
    """On the worker: answer every job of `jobs`, in groups of one engine call each."""
    groups: dict[Any, list[tuple[Pending, str | None]]] = {}
    for k, job in enumerate(jobs):
        try:
            service.check_session(job.session)
            adapter = service.registry.sampler(job.sampler_id).adapter  # it may have gone since
        except Refusal as err:
            job.future.set_exception(err)
            continue
        key = sampling.batch_key(adapter, job.plan)
        groups.setdefault(key if key is not None else ("seeded", k), []).append((job, adapter))
    for group in groups.values():
        _run_group(service, group)


def _run_group(service: SampleHost, group: list[tuple[Pending, str | None]]) -> None:
    adapter = group[0][1]
    try:
        answers = sampling.sample_many(service.backbone, service.engine, adapter, [j.plan for j, _ in group])
    except Exception as err:
        if len(group) > 1:
            for one in group:
                _run_group(service, [one])
            return
        if not isinstance(err, Refusal):
            log.exception("tinker sample failed")
        group[0][0].future.set_exception(err)
        return
    service.count_samples(len(group))
    for (job, _), answer in zip(group, answers, strict=True):
        job.future.set_result(answer)
