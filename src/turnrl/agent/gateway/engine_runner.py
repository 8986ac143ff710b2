"""The gateway's calls into the run's rollout engine, from many episodes at once.

An engine that may be called from several threads (`engine.concurrent`, the server engine: its
inference servers merge requests themselves) gets each call on a thread of its own. Any other (the
in-process `hf` engine, vLLM, a remote actor rank) is owned by one worker thread that merges the
calls waiting together into one `generate` (`servers.inference.batcher`, `turnrl serve`'s own): a
step's episodes then share the engine's batch as a turn-locked agent loop's turns do. A call whose
episode has gone is dropped from the queue, or stopped at the engine's next decode step where the
engine can (`abort`).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from turnrl.rollout.base import Generation, RolloutEngine, SamplingParams
from turnrl.servers.inference.batcher import Batcher


class _AbortAware:
    """An engine as the batcher calls it: `abort` passed on where `generate` takes it."""

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine
        self.takes_abort = "abort" in inspect.signature(engine.generate).parameters

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
        abort: Callable[[], set[int]] | None = None,
    ) -> Generation:
        if self.takes_abort:
            out: Generation = self.engine.generate(  # type: ignore[call-arg]
                prompt_ids, params, max_new_tokens_per_row, abort=abort
            )
            return out
        return self.engine.generate(prompt_ids, params, max_new_tokens_per_row)


class EngineRunner:
    """`submit(prompt, params, gone)` -> a Future of the one-row Generation."""

    def __init__(self, engine: RolloutEngine, max_concurrency: int) -> None:
        self.concurrent = bool(getattr(engine, "concurrent", False))
        self.engine = engine
        self.pool: ThreadPoolExecutor | None = None
        self.batcher: Batcher | None = None
        if self.concurrent:
            self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="turnrl-gateway-engine")
        else:
            self.batcher = Batcher(_AbortAware(engine), max_batch_rows=max(256, max_concurrency))
        self._inflight: set[Future[Generation]] = set()
        self._lock = threading.Lock()

    def submit(self, prompt: list[int], params: SamplingParams, gone: threading.Event) -> Future[Generation]:
        if self.batcher is not None:
            future = self.batcher.submit([prompt], params, gone)
        else:
            assert self.pool is not None
            future = self.pool.submit(self.engine.generate, [prompt], params)
        with self._lock:
            self._inflight.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._inflight.discard(future)

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until no engine call is running or waiting (the trainer may then change the weights
        the engine samples from); False if some still run after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._inflight:
                    return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close(timeout=10)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
