"""Stages 1-6 of every step (prompts, generate, group, score), run by the producer in both modes.

The rule that bounds staleness: the batch for step s may start only once the trainer has finished
step s - 1 - k (k = `trainer.max_staleness`). Each finished step makes at most one actor update, so a
batch started at policy version v is trained at version <= v + k. With k = 0 a batch starts only
after the previous step synced its weights: that is the synchronous run, and the producer then runs
inline when the trainer asks for the next batch (no thread, nothing to wait for). With k > 0 it runs
in a thread, up to k steps ahead.

The producer draws the prompts, so the data loader may run ahead of training; each item carries the
loader's position after its prompts were drawn, and a checkpoint saves the position of the last
*trained* item: batches still buffered at a save are regenerated on resume (counted), never lost
and never trained twice.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnrl.batch import Batch


@dataclass
class Produced:
    """One step's rollout, scored: what the trainer's stages 7-13 need."""

    step: int
    batch: Batch
    metrics: dict[str, Any]
    timing: dict[str, float]
    """Stage seconds of stages 1-6 as the producer measured them (`timing_s/<stage>`)."""
    loader_state: dict[str, Any]
    """The data loader's position right after this step's prompts were drawn."""
    gate_wait_s: float = 0.0
    """Seconds the producer waited for the staleness bound before starting this batch."""
    done_at: float = field(default_factory=time.perf_counter)
    """When it was scored (`time.perf_counter`): its age when trained is the wait in the queue."""


class _Failed:
    def __init__(self, err: BaseException):
        self.err = err


class RolloutProducer:
    """Runs `produce(step)` for steps `first..last`, at most `max_staleness` steps ahead of training:
    inline at 0, in a thread above."""

    def __init__(self, produce: Callable[[int], Produced], first: int, last: int, max_staleness: int):
        self.produce, self.first, self.last, self.k = produce, first, last, max_staleness
        self.next_step = first  # inline: the step `next` produces
        self.items: queue.Queue[Produced | _Failed] = queue.Queue()
        self.cond = threading.Condition()
        self.trained = first - 1  # the last step the trainer finished
        self.stopping = False
        self.busy = False  # generating a batch right now
        self.thread: threading.Thread | None = None
        if max_staleness > 0:
            self.thread = threading.Thread(target=self._run, name="turnrl-producer", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        try:
            for step in range(self.first, self.last + 1):
                start = time.perf_counter()
                with self.cond:
                    self.cond.wait_for(lambda s=step: self.stopping or self.trained >= s - 1 - self.k)
                    if self.stopping:
                        return
                waited = time.perf_counter() - start
                self.busy = True
                try:
                    item = self.produce(step)
                finally:
                    self.busy = False
                item.gate_wait_s = waited
                self.items.put(item)
        except BaseException as err:  # handed to the trainer, which raises it in its own thread
            self.items.put(_Failed(err))

    def next(self) -> tuple[Produced, float, int]:
        """The next step's rollout, the seconds the trainer waited for it, and how many more were
        ready behind it (the queue depth)."""
        start = time.perf_counter()
        if self.thread is None:  # k = 0: the previous step has synced, so this one starts now
            if self.next_step > self.last:
                raise RuntimeError(f"the rollout producer was asked for step {self.next_step} > {self.last}")
            item = self.produce(self.next_step)
            self.next_step += 1
            return item, time.perf_counter() - start, 0
        got: Produced | _Failed
        while True:
            try:
                got = self.items.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.thread.is_alive():
                    raise RuntimeError("the rollout producer stopped without a result") from None
        if isinstance(got, _Failed):
            raise got.err
        return got, time.perf_counter() - start, self.items.qsize()

    def step_done(self, step: int) -> None:
        """The trainer finished `step` (and synced its weights): the producer may go ahead."""
        with self.cond:
            self.trained = step
            self.cond.notify_all()

    def buffered(self) -> int:
        """Rollouts generated or started but not trained: regenerated if the run resumes now."""
        return self.items.qsize() + int(self.busy)

    def close(self) -> None:
        """Stop after the batch in flight (its generation is not interrupted; the thread is a
        daemon, so a run that exits does not wait for it)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
