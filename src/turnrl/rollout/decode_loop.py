"""The token-by-token part of `HFEngine`'s sampling, after the prompts' prefill.

Per output row it keeps, on the device, the sampled ids, their log-probs, the length so far and
whether EOS was seen. Every `sync_every` steps the host looks: it cuts rows at stop strings,
ends the loop when every row is done, and (on the dynamic-cache path) drops finished rows from
the batch and the KV cache once they have ridden along long enough for the copy to pay
(`compaction_pays`); in between, the device never waits on Python. At the same points an
optional `abort` callback names rows nobody will read (a server's client that left): they end
there, with finish reason "abort", and leave the batch like any finished row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from turnrl.models.cache_name import cache_kw, cache_of
from turnrl.rollout.attention import FROZEN_KV, SHARED_KV
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.rollout.graph_decode import DecodeBucket
from turnrl.rollout.kv_cache import freeze
from turnrl.rollout.work import EngineWork


class DecodingEngine(Protocol):
    """What the loop uses of its engine (`rollout.hf.HFEngine`): declared here so that the loop
    does not import the engine that imports it."""

    model: torch.nn.Module
    pad_id: int
    eos_ids: set[int]
    work: EngineWork

    def _sample(
        self, logits: torch.Tensor, p: SamplingParams, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def _apply_stops(
        self,
        tokens: torch.Tensor,
        length: torch.Tensor,
        alive: torch.Tensor,
        done: torch.Tensor,
        window_start: int,
        stops: list[str],
        stopped: dict[int, int],
    ) -> torch.Tensor: ...


def compaction_pays(ridden: int, kept: int) -> bool:
    """Whether finished rows should leave the batch now, `ridden` row-steps after the last time.

    A finished row left in the batch costs a row of every later step: its attention over its own
    cached positions and its share of the products. Dropping the finished rows copies the filled
    cache of the kept rows that move, at most about two steps' attention reads of the `kept` rows.
    Dropping at every finish (64 rows finishing one by one: up to 64 copies of the whole cache a
    turn) spent a fifth of an agent evaluation's decode copying; riding forever wastes rows on every
    step. Dropping once the row-steps ridden reach the kept rows (ski rental: rent until the rent
    paid matches the price) keeps either waste within about one copy. Hand-worked: 63 rows kept,
    one finished: it rides 63 steps, then leaves; half of 64 finished at once: they leave after
    one step (32 >= 32)."""
    return ridden >= kept


class DecodeLoop:
    """One batch's decode: `run()` samples up to `budget` tokens per row from the prefill's
    `logits` and `cache` (rows A,A,B,B: already repeated `params.n` times)."""

    def __init__(
        self,
        engine: DecodingEngine,
        p: SamplingParams,
        gen: torch.Generator,
        device: torch.device,
        limits: list[int],
        budget: int,
        sync_every: int,
        prefill: tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor],
        graph: DecodeBucket | None,
        abort: Callable[[], set[int]] | None = None,
        keep: Callable[[DecodeLoop, list[int], list[int]], None] | None = None,
        shared_kv: int = 0,
        frozen: bool = False,
    ):
        """`prefill`: (KV cache, last logits, attention mask, position ids) of the repeated rows;
        `graph`: the compiled fixed-shape decode step, or None for the dynamic cache; `abort`: the
        rows (0 .. len(limits)-1) to stop at the next host sync, asked at every sync; `keep`: called
        with the loop, the output rows and their batch rows just before they leave the batch (the
        engine's prefix store reads their keys and values); `shared_kv`: the leading cached positions
        every row holds the same keys and values at, for an attention that reads them once (0: none
        or an attention that does not); `frozen`: copy the prompt's own keys and values out of the
        preallocated cache's view once, for the decode attention to read (`kv_cache.freeze`)."""
        self.engine, self.p, self.gen, self.budget, self.sync_every = engine, p, gen, budget, sync_every
        self.cache, self.logits, self.mask, pos = prefill
        self.context = self.mask.shape[1]  # cached positions the next decode step reads
        self.graph = graph
        b = len(limits)
        self.tokens = torch.full((b, budget), engine.pad_id, dtype=torch.long, device=device)
        self.logps = torch.zeros((b, budget), dtype=torch.float32, device=device)
        self.length = torch.zeros(b, dtype=torch.long, device=device)
        self.hit_eos = torch.zeros(b, dtype=torch.bool, device=device)
        self.limit = torch.tensor(limits, dtype=torch.long, device=device)
        eos = [] if p.ignore_eos else sorted(engine.eos_ids)
        self.eos = torch.tensor(eos, dtype=torch.long, device=device)
        self.stopped: dict[int, int] = {}  # output row -> length cut at its stop string
        self.abort = abort
        self.keep = keep
        self.extra: dict[str, Any] = {SHARED_KV: shared_kv} if shared_kv else {}
        if frozen:
            self.extra[FROZEN_KV] = freeze(self.cache, shared_kv)
        self.aborted: set[int] = set()  # output rows stopped because nobody reads them any more
        self.alive = torch.arange(b, device=device)  # batch rows still generating -> output row
        self.done = torch.zeros(b, dtype=torch.bool, device=device)  # finished, still in the batch
        self.next_pos = pos[:, -1:] + 1
        self.window_start = 0
        self.ridden = 0  # row-steps finished rows have ridden along since the last compaction

    def run(self) -> Generation:
        for step in range(self.budget):
            token = self._sample(step)
            last = step == self.budget - 1
            if (step + 1) % self.sync_every == 0 or last:  # a host sync: stop strings, all done?, compaction
                token, finished = self._host_sync(step, token, last)
                if finished:
                    break
            self._forward(token)
        return self._collect()

    def _sample(self, step: int) -> torch.Tensor:
        """Sample the next token of the rows still generating and record it. With a host sync at every
        step the finished rows riding along draw nothing: each step's draws go to exactly the rows
        that dropping at every finish would hold, so a seeded sample does not depend on when
        finished rows leave (and their vocabulary pass is saved)."""
        done, alive = self.done, self.alive
        if self.sync_every == 1 and bool(done.any()):
            live = (~done).nonzero().squeeze(-1)
            drawn, drawn_lp = self.engine._sample(self.logits[live], self.p, self.gen)
            token = torch.full_like(alive, self.engine.pad_id).index_copy_(0, live, drawn)
            lp = torch.zeros(len(alive), dtype=drawn_lp.dtype, device=drawn_lp.device)
            lp.index_copy_(0, live, drawn_lp)
        else:
            token, lp = self.engine._sample(self.logits, self.p, self.gen)
        token = token.masked_fill(done, self.engine.pad_id)  # finished rows ride along until compaction
        self.tokens[alive, step] = token
        self.logps[alive, step] = lp.masked_fill(done, 0.0)
        self.length[alive] = torch.where(done, self.length[alive], step + 1)
        eos_now = ~done & torch.isin(token, self.eos)
        self.hit_eos[alive] |= eos_now
        self.done = done | eos_now | (step + 1 >= self.limit[alive])
        return token

    def _host_sync(self, step: int, token: torch.Tensor, last: bool) -> tuple[torch.Tensor, bool]:
        """Cut rows at stop strings; True when the loop is over; else drop finished rows when it pays
        (`compaction_pays`; dynamic cache only: the compiled step keeps its shapes)."""
        if self.p.stop:
            self.done = self.engine._apply_stops(
                self.tokens, self.length, self.alive, self.done, self.window_start, self.p.stop, self.stopped
            )
        self.window_start = step + 1
        if self.abort is not None:
            self._apply_abort()
        keep = (~self.done).nonzero().squeeze(-1)
        if last or len(keep) == 0:
            self._leave(torch.arange(len(self.alive), device=keep.device))
            return token, True
        finished = len(self.alive) - len(keep)
        self.ridden += finished * self.sync_every
        # drop them from the batch and the cache (the compiled step keeps its shapes)
        if self.graph is None and finished and compaction_pays(self.ridden, len(keep)):
            self.ridden = 0
            self._leave(self.done.nonzero().squeeze(-1))
            self.alive, token, self.mask = self.alive[keep], token[keep], self.mask[keep]
            self.next_pos, self.done = self.next_pos[keep], self.done[keep]
            self.cache.batch_select_indices(keep)
        return token, False

    def _leave(self, batch_rows: torch.Tensor) -> None:
        if self.keep is not None and len(batch_rows):
            self.keep(self, self.alive[batch_rows].tolist(), batch_rows.tolist())

    def _apply_abort(self) -> None:
        """Mark done the rows still generating that `abort` names; they keep what they sampled."""
        assert self.abort is not None
        wanted = self.abort() - self.aborted
        if not wanted:
            return
        alive, done = self.alive.tolist(), self.done.tolist()
        hit = [j for j, r in enumerate(alive) if r in wanted and not done[j]]  # not those already ended
        if hit:
            self.aborted.update(alive[j] for j in hit)
            self.done = self.done.clone()
            self.done[hit] = True

    def _forward(self, token: torch.Tensor) -> None:
        """The next logits: one decode step over the sampled tokens."""
        counted = self.engine.work
        counted.decode_steps += 1
        counted.decode_rows += token.shape[0]
        counted.decode_kv_tokens += token.shape[0] * self.context
        self.context += 1
        if self.graph is not None:  # finished rows ride along to the end: shapes stay fixed
            self.logits = self.graph.decode(token)
            return
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        out = self.engine.model(
            input_ids=token[:, None],
            attention_mask=self.mask,
            position_ids=self.next_pos,
            **cache_kw(self.cache),
            use_cache=True,
            **self.extra,
        )
        self.cache, self.logits = cache_of(out), out.logits[:, -1, :]
        self.next_pos = self.next_pos + 1

    def _collect(self) -> Generation:
        """Each row's ids and log-probs up to its length (or its stop-string cut), and why it ended."""
        lengths, eos_rows = self.length.tolist(), self.hit_eos.tolist()
        token_rows, logp_rows = self.tokens.tolist(), self.logps.tolist()
        responses, log_probs, reasons = [], [], []
        for r in range(len(lengths)):
            k = self.stopped.get(r, lengths[r])
            responses.append(token_rows[r][:k])
            log_probs.append(logp_rows[r][:k])
            # EOS or a stop string ends a response with 'stop' even when it also used the last budget token
            if r in self.aborted:
                reasons.append("abort")
            else:
                reasons.append("stop" if r in self.stopped or (eos_rows[r] and k == lengths[r]) else "length")
        return Generation(responses, log_probs, reasons)
