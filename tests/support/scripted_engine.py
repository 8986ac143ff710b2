"""A rollout engine that plays scripted model turns, for agent-loop tests that need exact actions.

`script(context)` returns the ids of one row's turn, or None to let `inner` (a real engine) sample
that row. Every row is recorded with its call's wall-clock times and reported policy version, so
tests can check scheduling (which call waited for what) and per-token versions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from turnrl.rollout.base import Generation, SamplingParams


@dataclass
class Row:
    context: list[int]
    ids: list[int]
    version: int
    start: float
    end: float


class ScriptedEngine:
    def __init__(
        self,
        script: Callable[[list[int]], list[int] | None],
        eos_ids: set[int] | None = None,
        inner=None,
        concurrent: bool = False,
        delay: float = 0.0,
        bump_version: bool = False,
        log_prob: float = -0.5,
    ):
        self.script, self.inner, self.delay, self.log_prob = script, inner, delay, log_prob
        self.eos_ids = set(inner.eos_ids) if inner is not None else set(eos_ids or ())
        self.concurrent = concurrent
        """Declared like a server engine would: the loop then overlaps calls in streaming mode (only
        for fully scripted turns: `inner`, an in-process engine, takes one call at a time)."""
        self.bump_version = bump_version
        """+1 to the reported policy version after every call (weights updated between calls)."""
        self.version = 0
        self.max_lag = 0  # the engine protocol's; scripted rows report the version they were given
        self.rows: list[Row] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()

    def generate(
        self, prompt_ids: list[list[int]], params: SamplingParams, max_new_tokens_per_row=None
    ) -> Generation:
        start = time.perf_counter()
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            version = self.version
            contexts = [list(p) for p in prompt_ids for _ in range(params.n)]
            forced = [self.script(c) for c in contexts]
        try:
            time.sleep(self.delay)
            out = self._fill(contexts, forced, params, max_new_tokens_per_row, version)
        finally:
            with self._lock:
                self.in_flight -= 1
        end = time.perf_counter()
        with self._lock:
            for c, ids in zip(contexts, out.response_ids, strict=True):
                self.rows.append(Row(c, ids, version, start, end))
            if self.bump_version:
                self.version += 1
        return out

    def _fill(self, contexts, forced, params, max_new_tokens_per_row, version) -> Generation:
        limits = max_new_tokens_per_row or [params.max_new_tokens] * len(contexts)
        free = [i for i, f in enumerate(forced) if f is None]
        if free:
            assert self.inner is not None, "the script has no turn for this context"
            sampled = self.inner.generate(
                [contexts[i] for i in free], replace(params, n=1), [limits[i] for i in free]
            )
        out = Generation([], [], [], policy_version=version)
        for i, (ids, limit) in enumerate(zip(forced, limits, strict=True)):
            if ids is None:
                k = free.index(i)
                ids, lps, reason = sampled.response_ids[k], sampled.log_probs[k], sampled.finish_reasons[k]
            else:
                reason = "length" if len(ids) > limit else "stop"
                ids = ids[:limit]
                lps = [self.log_prob] * len(ids)
            out.response_ids.append(list(ids))
            out.log_probs.append(list(lps))
            out.finish_reasons.append(reason)
        return out

    def sync_weights(self, version: int) -> None:
        self.version = version

    def close(self) -> None:
        pass
