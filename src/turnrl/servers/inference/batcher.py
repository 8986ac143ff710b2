"""Dynamic batching for `turnrl serve`: one worker thread owns the engine and merges requests.

In asynchronous RL every agent episode sends its own small request (one prompt, n=1) whenever its
last tool call returns; run one by one they leave the engine mostly idle. The worker takes the
oldest waiting request and every other waiting request that can share its sampling loop, and runs
them as one `engine.generate` call: rows concatenated, each request's own `max_tokens` as its rows'
budget (`max_new_tokens_per_row`), the Generation split back per request.

Requests share a batch when temperature, top_p, top_k, stop strings and n are equal and none of
them carries a seed. A seeded request always runs alone, exactly as it would without batching:
its samples depend on the seed and on the rows drawn with it, so merging would change them.

Weight loads and other exclusive calls go through the same worker, ahead of waiting generations:
a load waits for the running batch only, and the next batch samples with the new weights.

A client that leaves sets its request's `gone` event: a waiting request is then dropped from the
queue (`requests_dropped`), and a running one stops at the engine's next decode step, its rows freed
for the rest of the batch (`requests_aborted`), so nobody waits behind work nobody will read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from turnrl.rollout.base import Generation, SamplingParams

log = logging.getLogger("turnrl.serve")


class Engine(Protocol):
    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
        abort: Callable[[], set[int]] | None = None,
    ) -> Generation: ...


@dataclass
class _Job:
    prompts: list[list[int]]
    params: SamplingParams
    future: Future[Generation] = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)
    gone: threading.Event = field(default_factory=threading.Event)
    """Set when nobody will read the answer (the client left)."""

    @property
    def rows(self) -> int:
        return len(self.prompts) * self.params.n


def batch_key(params: SamplingParams) -> tuple[Any, ...] | None:
    """What requests must share to run in one sampling loop; None = must run alone (seeded)."""
    if params.seed is not None:
        return None
    return (params.temperature, params.top_p, params.top_k, tuple(params.stop), params.n, params.ignore_eos)


def _abort_of(batch: list[_Job]) -> Callable[[], set[int]]:
    """The engine's `abort` for a batch: the output rows of its requests whose client left."""
    spans, start = [], 0
    for job in batch:
        spans.append((job.gone, range(start, start + job.rows)))
        start += job.rows

    def abort() -> set[int]:
        return {r for gone, rows in spans if gone.is_set() for r in rows}

    return abort


def split(gen: Generation, rows: list[int]) -> list[Generation]:
    """Cut a combined Generation into consecutive parts of `rows` rows each."""
    parts, start = [], 0
    for k in rows:
        end = start + k
        versions = gen.token_versions[start:end] if gen.token_versions is not None else None
        parts.append(
            Generation(
                gen.response_ids[start:end],
                gen.log_probs[start:end],
                gen.finish_reasons[start:end],
                policy_version=gen.policy_version,
                token_versions=versions,
            )
        )
        start = end
    return parts


class Busy(RuntimeError):
    """`max_waiting` requests already wait: the server answers 503 with Retry-After."""


class Batcher:
    """A queue of generation requests and exclusive calls, served by one worker thread.

    `max_batch_rows` caps the output rows (prompts x n) of a merged call; a single request larger
    than that still runs, alone. `batch_wait_s`: when the only waiting request could be merged, wait
    up to this long after its arrival for others, so near-simultaneous episodes meet.
    """

    def __init__(
        self, engine: Engine, max_batch_rows: int = 256, batch_wait_s: float = 0.005, max_waiting: int = 64
    ) -> None:
        if max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be >= 1, got {max_waiting}")
        self.engine, self.max_batch_rows, self.batch_wait_s = engine, max_batch_rows, batch_wait_s
        self.max_waiting = max_waiting
        self.requests_refused_busy = 0  # answered 503: max_waiting requests were already waiting
        self.batches_run = 0
        self.requests_served = 0
        self.max_rows_in_a_batch = 0
        self.requests_dropped = 0  # their client left while they waited: never run
        self.requests_aborted = 0  # their client left while they ran: stopped early
        self._jobs: list[_Job] = []  # oldest first
        self._calls: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="turnrl-serve-batcher", daemon=True)
        self._thread.start()

    def stats(self) -> dict[str, int]:
        return {
            "batches_run": self.batches_run,
            "requests_served": self.requests_served,
            "max_rows_in_a_batch": self.max_rows_in_a_batch,
            "requests_dropped": self.requests_dropped,
            "requests_aborted": self.requests_aborted,
            "requests_waiting": len(self._jobs),
            "requests_refused_busy": self.requests_refused_busy,
        }

    def submit(
        self, prompts: list[list[int]], params: SamplingParams, gone: threading.Event | None = None
    ) -> Future[Generation]:
        """Queue a generation; the future holds its Generation or the error of the batch it ran in.
        Setting `gone` (the client left) drops the request if it still waits and stops its rows at
        the next decode step if it runs; cancelling the future before its batch starts drops it too."""
        job = _Job(prompts, params) if gone is None else _Job(prompts, params, gone=gone)
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._drop_gone()  # a client that left holds no place in the queue
            if len(self._jobs) >= self.max_waiting:
                self.requests_refused_busy += 1
                raise Busy(
                    f"{len(self._jobs)} requests already wait for the engine (--max-waiting {self.max_waiting})"
                )
            self._jobs.append(job)
            self._cond.notify_all()
        return job.future

    def call(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run `fn` on the worker between two batches (before any waiting generation)."""
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._calls.append((fn, future))
            self._cond.notify_all()
        return future

    def close(self, timeout: float | None = None) -> None:
        """Stop after the running batch; waiting requests fail with RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._jobs and not self._calls:
                    self._cond.wait()
                if self._closed:
                    self._fail_waiting()
                    return
                if not self._calls:
                    self._wait_for_company()
                # a call that arrived while we waited goes first too
                call = self._calls.popleft() if self._calls else None
                batch = [] if call else self._take_batch()
            if call is not None:
                self._run_call(*call)
            elif batch:  # empty when every waiting client had gone
                self._run(batch)

    def _wait_for_company(self) -> None:
        """With one mergeable request waiting, give others `batch_wait_s` from its arrival to join.
        Called with the lock held."""
        first = self._jobs[0]
        if len(self._jobs) > 1 or batch_key(first.params) is None or self.batch_wait_s <= 0:
            return
        deadline = first.arrived + self.batch_wait_s
        while not self._closed and not self._calls:
            rows = sum(j.rows for j in self._jobs if batch_key(j.params) == batch_key(first.params))
            left = deadline - time.monotonic()
            if left <= 0 or rows >= self.max_batch_rows:
                return
            self._cond.wait(left)

    def _take_batch(self) -> list[_Job]:
        """The oldest request and every waiting one that can share its batch, up to the row cap.
        Called with the lock held. Requests whose client has gone are dropped here."""
        self._drop_gone()
        batch: list[_Job] = []
        key, rows, keep = None, 0, []
        for job in self._jobs:
            if not batch:
                if job.future.set_running_or_notify_cancel():
                    batch.append(job)
                    key, rows = batch_key(job.params), job.rows
                continue
            joins = (
                key is not None and batch_key(job.params) == key and rows + job.rows <= self.max_batch_rows
            )
            if joins and job.future.set_running_or_notify_cancel():
                batch.append(job)
                rows += job.rows
            elif joins:
                continue  # cancelled: drop it
            else:
                keep.append(job)
        self._jobs = keep
        return batch

    def _drop_gone(self) -> None:
        """Forget waiting requests whose client left. Called with the lock held."""
        keep = []
        for job in self._jobs:
            if job.gone.is_set():
                job.future.cancel()
            if job.future.cancelled():
                self.requests_dropped += 1
            else:
                keep.append(job)
        self._jobs = keep

    def _run(self, batch: list[_Job]) -> None:
        abort = _abort_of(batch)
        try:
            if len(batch) == 1:  # exactly the call an unbatched server makes (seeded requests run here)
                parts = [self.engine.generate(batch[0].prompts, batch[0].params, abort=abort)]
            else:
                budgets = [j.params.max_new_tokens for j in batch for _ in range(j.rows)]
                params = replace(batch[0].params, max_new_tokens=max(budgets))
                prompts = [p for j in batch for p in j.prompts]
                gen = self.engine.generate(prompts, params, budgets, abort=abort)
                parts = split(gen, [j.rows for j in batch])
        except Exception as err:  # out of memory, a bug: fail this batch's requests, serve the next
            log.warning("a batch of %d requests failed: %s: %s", len(batch), type(err).__name__, err)
            for job in batch:
                job.future.set_exception(err)
            return
        finally:
            self.batches_run += 1
            self.max_rows_in_a_batch = max(self.max_rows_in_a_batch, sum(j.rows for j in batch))
        # counted before the results go out: a client that reads /health right after its answer
        # must see its own request served
        aborted = sum(1 for job in batch if job.gone.is_set())
        self.requests_aborted += aborted
        self.requests_served += len(batch) - aborted
        for job, part in zip(batch, parts, strict=True):
            job.future.set_result(part)

    def _run_call(self, fn: Callable[[], Any], future: Future[Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except Exception as err:
            future.set_exception(err)

    def _fail_waiting(self) -> None:
        err = RuntimeError("turnrl serve is shutting down")
        for job in self._jobs:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(err)
        for _fn, future in self._calls:
            if future.set_running_or_notify_cancel():
                future.set_exception(err)
        self._jobs, self._calls = [], deque()
