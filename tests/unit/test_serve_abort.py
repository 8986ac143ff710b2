"""Stopping work nobody will read: `HFEngine.generate(abort=...)` and the batcher's `gone` jobs.

The engine asks `abort` at every host sync (every step on the CPU) for the output rows to stop:
they end there with finish reason "abort", the others go on as they would have, and a forward
batch whose rows are all aborted is never run. Without `abort` (the trainer) nothing changes, bit
for bit. The batcher gives each request a `gone` event (its client left): a waiting request is
dropped unrun, a running one has its rows stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from turnrl.rollout.base import Generation, SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.inference.batcher import Batcher

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14, 15, 16, 17, 18]]


class Countdown:
    """An `abort` that names `rows` from its `after`-th call on, counting its calls."""

    def __init__(self, rows: set[int], after: int) -> None:
        self.rows, self.after, self.calls = rows, after, 0

    def __call__(self) -> set[int]:
        self.calls += 1
        return self.rows if self.calls >= self.after else set()


@pytest.mark.parametrize("kv_cache", ["preallocated", "dynamic"])
def test_no_abort_changes_nothing_bit_for_bit(tiny, kv_cache):
    engine = HFEngine(*tiny, batch_size=4, kv_cache=kv_cache)
    p = SamplingParams(max_new_tokens=10, n=2, temperature=1.0, seed=3)
    plain = engine.generate(PROMPTS, p, [10, 3, 7, 10, 1, 5, 9, 10])
    idle = Countdown({0, 1}, after=10**9)  # asked at every sync, never names a row
    asked = engine.generate(PROMPTS, p, [10, 3, 7, 10, 1, 5, 9, 10], abort=idle)
    assert idle.calls > 0
    assert asked.response_ids == plain.response_ids and asked.finish_reasons == plain.finish_reasons
    assert asked.log_probs == plain.log_probs  # exactly: the same operations ran


@pytest.mark.parametrize("kv_cache", ["preallocated", "dynamic"])
def test_aborted_rows_stop_at_the_next_step_and_the_others_go_on(tiny, kv_cache):
    engine = HFEngine(*tiny, batch_size=16, kv_cache=kv_cache)
    engine.eos_ids = set()  # every row would run its whole budget
    p = SamplingParams(max_new_tokens=12, n=2, temperature=0.0)
    full = engine.generate(PROMPTS, p)
    stop = Countdown({1, 4, 5}, after=3)  # asked once before the batch, then at every step's sync
    cut = engine.generate(PROMPTS, p, abort=stop)
    for row in range(8):
        if row in stop.rows:  # the tokens up to the second step, no more
            assert cut.finish_reasons[row] == "abort" and cut.response_ids[row] == full.response_ids[row][:2]
        else:  # the batch shrank around them (dynamic cache): same greedy tokens, same log-probs
            assert cut.finish_reasons[row] == "length" and cut.response_ids[row] == full.response_ids[row]
            assert torch.allclose(
                torch.tensor(cut.log_probs[row]), torch.tensor(full.log_probs[row]), atol=1e-5
            )


def test_a_forward_batch_whose_rows_are_all_aborted_is_skipped(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=2)  # one prompt x n=2 per forward batch: four batches
    forwards = []
    handle = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        p = SamplingParams(max_new_tokens=4, n=2, temperature=0.0)
        gen = engine.generate(PROMPTS, p, abort=lambda: {2, 3, 4, 5, 6, 7})  # all but prompt 0
    finally:
        handle.remove()
    assert gen.finish_reasons[2:] == ["abort"] * 6 and gen.response_ids[2:] == [[]] * 6
    assert gen.finish_reasons[:2] != ["abort"] * 2 and len(gen.response_ids[0]) > 0
    assert len(forwards) <= 4  # prompt 0's prefill and decode steps only (none for the others)


# ---------------------------------------------------------------- the batcher


@dataclass
class GatedEngine:
    """Blocks in each call until `gate` is set; keeps every call's `abort`."""

    gate: threading.Event = field(default_factory=threading.Event)
    started: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    calls: list[list[list[int]]] = field(default_factory=list)
    aborts: list[Callable[[], set[int]] | None] = field(default_factory=list)

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
        abort: Callable[[], set[int]] | None = None,
    ) -> Generation:
        self.calls.append(prompt_ids)
        self.aborts.append(abort)
        self.started.release()
        assert self.gate.wait(10)
        rows = len(prompt_ids) * params.n
        gone = abort() if abort is not None else set()
        reasons = ["abort" if r in gone else "length" for r in range(rows)]
        return Generation([[1]] * rows, [[-1.0]] * rows, reasons)


def test_the_batcher_drops_a_gone_job_and_stops_a_running_one():
    engine = GatedEngine()
    batcher = Batcher(engine, batch_wait_s=0.0)
    p = SamplingParams(max_new_tokens=2, n=2)
    running_gone = threading.Event()
    running = batcher.submit([[0], [1]], p, running_gone)
    assert engine.started.acquire(timeout=5)
    waiting_gone = threading.Event()
    waiting = batcher.submit([[2]], p, waiting_gone)
    kept = batcher.submit([[3]], SamplingParams(max_new_tokens=2, n=2, seed=1))  # runs alone, after
    abort = engine.aborts[0]
    assert abort is not None and abort() == set()
    running_gone.set()  # its client left while it ran: the engine is told its rows
    assert abort() == {0, 1, 2, 3}
    waiting_gone.set()  # its client left while it waited: it never runs
    engine.gate.set()
    assert kept.result(5).finish_reasons == ["length", "length"]
    assert running.result(5).finish_reasons == ["abort"] * 4
    assert waiting.cancelled()
    assert engine.calls == [[[0], [1]], [[3]]]
    stats: dict[str, Any] = batcher.stats()
    assert (stats["requests_served"], stats["requests_dropped"], stats["requests_aborted"]) == (1, 1, 1)
    batcher.close(5)
