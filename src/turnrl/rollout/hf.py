"""Rollout with a transformers model: a batched sampling loop over the KV cache.

We run our own loop instead of `model.generate` to get, at no extra memory, the
log-prob of each sampled token at the sampling temperature, exact per-row stopping on
EOS or stop strings, and rows dropped from the batch as soon as they finish.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch._dynamo.exc

from turnrl.models.cache_name import cache_kw, cache_of
from turnrl.rollout.attention import decode_attention, reads_shared_kv
from turnrl.rollout.base import Generation, SamplingParams, row_limits
from turnrl.rollout.decode_loop import DecodeLoop
from turnrl.rollout.graph_decode import DecodeBucket, capacity_for
from turnrl.rollout.kv_cache import freeze_pays, preallocated_cache
from turnrl.rollout.prefix import prefix_layout, shared_prefix_length
from turnrl.rollout.prefix_store import PrefixStore, Restored, store_rows
from turnrl.rollout.rollout_copy import RolloutCopy, torch_dtype
from turnrl.rollout.sampling import sample_tokens
from turnrl.rollout.work import EngineWork, now
from turnrl.tensors import position_ids_from_mask

log = logging.getLogger(__name__)


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    cfg = getattr(model, "generation_config", None)
    eos = getattr(cfg, "eos_token_id", None)
    for value in eos if isinstance(eos, list) else [eos]:
        if value is not None:
            ids.add(int(value))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _rows_of(abort: Callable[[], set[int]], first: int, count: int) -> Callable[[], set[int]]:
    """`abort` seen from one forward batch: its rows `first` .. `first + count - 1`, numbered from 0."""

    def local() -> set[int]:
        return {r - first for r in abort() if first <= r < first + count}

    return local


def default_sync_every(device: torch.device) -> int:
    """Decode steps between host syncs. On CPU a sync costs nothing and sees finished rows (and the
    end of the loop) at once; on a GPU each sync stalls the launch queue, so the host looks every few
    steps. Either way finished rows ride along masked until dropping them pays
    (`decode_loop.compaction_pays`)."""
    return 1 if device.type == "cpu" else 16


class HFEngine:
    """Samples from the actor's own module, in the actor's process: its weights are always the
    actor's current ones, so `sync_weights` only records the version.

    `sync_every` (0 = `default_sync_every`) is how many tokens are sampled between looks from the
    host: stop checks, finished-row compaction and stop strings all happen at those points, so the
    device never waits on Python in between.

    `dtype` (`rollout.dtype`; empty = the model's own): sample from a copy of the model in that
    precision instead (`rollout_copy.RolloutCopy`), refreshed at every `sync_weights`. `model` is
    then that copy; `source` is always the module given.

    `share_prefix` (`rollout.share_prefix`): prefill the prompt prefix all rows of a batch share
    once (`rollout.prefix`). `prefix_store_mb` (`rollout.prefix_cache_mb`, multi-turn rollouts): keep
    finished rows' keys and values, up to that many MiB, for the next turn's prompts that extend
    them (`rollout.prefix_store`); 0 = off. Only with the preallocated cache and the uncompiled step."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int = 64,
        sync_every: int = 0,
        kv_cache: str = "preallocated",
        compile_decode: bool | str = False,
        dtype: str = "",
        share_prefix: bool = True,
        prefix_store_mb: int = 0,
    ):
        if kv_cache not in ("preallocated", "dynamic"):
            raise ValueError(f"rollout.kv_cache={kv_cache!r}: use preallocated or dynamic")
        self.source = model
        low = torch_dtype(dtype) if dtype else None
        self.copy = (
            RolloutCopy(model, low, batch_size)
            if low is not None and low != next(model.parameters()).dtype
            else None
        )
        self.model = self.copy.module if self.copy is not None else model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.sync_every = sync_every
        self.max_lag = 0  # the protocol's; this engine reports one version per batch, the one it holds
        # sliding-window layers drop old positions, which the preallocated layer does not model
        layer_types = getattr(model.config.get_text_config(decoder=True), "layer_types", None) or []
        self.full_attention = all(t == "full_attention" for t in layer_types)
        # the shared prefix's layout pads between the prefix and each row's own tokens, and a
        # sliding window counts those padded columns: its rows would see fewer real tokens
        self.share_prefix = share_prefix and self.full_attention
        self.preallocate = kv_cache == "preallocated" and self.full_attention
        # True: compiled fixed-shape decode; "eager": the same fixed-shape step uncompiled (tests)
        self.compile_decode = compile_decode if self.full_attention else False
        self.buckets: dict[tuple[int, int], DecodeBucket] = {}
        on = prefix_store_mb > 0 and self.preallocate and not self.compile_decode
        self.store = PrefixStore(prefix_store_mb * 2**20) if on else None
        self.eos_ids = eos_ids(model, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id)
        self.version = 0
        self.work = EngineWork()

    def sample_from_copy(self) -> None:
        """From now on sample from a copy of the policy (the copy `rollout.dtype` made, else one in
        the model's own precision), refreshed at every `sync_weights`: the trainer may then update
        the policy while this engine serves (`turnrl live serve`)."""
        if self.copy is None:
            self.copy = RolloutCopy(self.source, next(self.source.parameters()).dtype, self.batch_size)
            self.model = self.copy.module
            self.buckets.clear()

    def _bucket(self, batch: int, capacity: int, device: torch.device) -> DecodeBucket:
        key = (batch, capacity)
        if key not in self.buckets:
            if len(self.buckets) >= 4:  # each holds a KV cache; keep the latest few
                self.buckets.pop(next(iter(self.buckets)))
            self.buckets[key] = DecodeBucket(self.model, batch, capacity, self.compile_mode(device))
        return self.buckets[key]

    def compile_mode(self, device: torch.device) -> str:
        """torch.compile's mode for the decode step: CUDA graphs on a GPU; "" runs the same
        fixed-shape step eagerly (tests compare it with the dynamic path)."""
        if self.compile_decode == "eager":
            return ""
        return "reduce-overhead" if device.type == "cuda" else "default"

    @property
    def compile_seconds(self) -> float:
        """Wall time spent compiling and recording decode graphs so far."""
        return sum(b.compile_s for b in self.buckets.values())

    def sync_weights(self, version: int) -> None:
        if self.copy is not None:
            self.copy.refresh()
        if self.store is not None:  # keys and values of the old weights
            self.store.clear()
        self.version = version

    def release(self, sequences: list[list[int]]) -> None:
        """These token sequences ended (finished agent episodes, whole): drop the keys and values
        their last turn left in the prefix store. Without this they stay until the next weight sync,
        through the update: on the search agent, the final turns of every episode of the step."""
        if self.store is not None:
            for ids in sequences:
                self.store.discard(ids)

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
        abort: Callable[[], set[int]] | None = None,
    ) -> Generation:
        """`max_new_tokens_per_row` (one per output row, at most `params.max_new_tokens`) lets rows of
        one batch stop at different budgets, as multi-turn episodes need.

        `abort`, asked at every host sync and before every forward batch, returns the output rows
        nobody will read any more (a server's client that left): they stop there with finish reason
        "abort" and free their place in the batch, and a forward batch whose rows are all aborted is
        skipped (its rows come back empty). None (the trainer's case) changes nothing."""
        limits = row_limits(prompt_ids, params, max_new_tokens_per_row)
        device = next(self.model.parameters()).device
        gen = torch.Generator(device=device)
        gen.manual_seed(params.seed if params.seed is not None else torch.seed() % 2**63)
        was_training = self.model.training
        self.model.eval()
        try:
            with decode_attention(self.model):  # grouped products at one query token (CPU)
                return self._generate_batches(prompt_ids, params, limits, gen, device, abort)
        finally:
            self.model.train(was_training)

    def _generate_batches(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        limits: list[int],
        gen: torch.Generator,
        device: torch.device,
        abort: Callable[[], set[int]] | None,
    ) -> Generation:
        """`generate` in forward batches of `batch_size` rows (whole groups of `params.n`)."""
        out = Generation([], [], [], policy_version=self.version)
        prompts_per_batch = max(1, self.batch_size // params.n)
        for start in range(0, len(prompt_ids), prompts_per_batch):
            first = start * params.n
            batch_limits = limits[first : (start + prompts_per_batch) * params.n]
            local = None if abort is None else _rows_of(abort, first, len(batch_limits))
            if local is not None and len(local()) == len(batch_limits):  # nobody reads these rows
                k = len(batch_limits)
                part = Generation([[] for _ in range(k)], [[] for _ in range(k)], ["abort"] * k)
            else:
                rows = prompt_ids[start : start + prompts_per_batch]
                part = self._generate_batch(rows, params, gen, device, batch_limits, local)
            out.response_ids += part.response_ids
            out.log_probs += part.log_probs
            out.finish_reasons += part.finish_reasons
        return out

    def _first_stop(self, ids: list[int], start: int, stops: list[str]) -> int | None:
        """Length of `ids` cut just after the first token at or after `start` that completes a stop
        string; None if none does. One decode of the window rules most rows out."""
        window = self.tokenizer.decode(ids[max(0, start - 16) :], skip_special_tokens=False)
        if not any(s in window for s in stops):
            return None
        for k in range(start, len(ids)):
            tail = self.tokenizer.decode(ids[max(0, k - 15) : k + 1], skip_special_tokens=False)
            if any(s in tail for s in stops):
                return k + 1
        return None

    @staticmethod
    def _sample(
        logits: torch.Tensor, p: SamplingParams, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_tokens(logits, p.temperature, p.top_k, p.top_p, gen)

    def _generate_batch(
        self,
        rows: list[list[int]],
        p: SamplingParams,
        gen: torch.Generator,
        device: torch.device,
        limits: list[int],
        abort: Callable[[], set[int]] | None = None,
    ) -> Generation:
        shared = shared_prefix_length(rows) if self.share_prefix else 0
        found = [self.store.take(r) for r in rows] if self.store is not None else [None] * len(rows)
        cached = [max(shared, len(e.ids)) if e is not None else shared for e in found]
        ids, mask = prefix_layout(rows, shared, self.pad_id, cached)
        ids, mask = ids.to(device), mask.to(device)
        pos = position_ids_from_mask(mask)
        budget = min(p.max_new_tokens, max(limits))
        # prefill each prompt once, then copy its KV cache for its n samples (A,A,B,B)
        started = now(device)
        restored = Restored(found, cached)
        cache, logits = self._prefill(ids, mask, pos, budget, shared, restored)
        self._count_prefill(mask, shared, shared + restored.width(shared), started, device)
        graph = None
        if self.compile_decode:  # one fixed-shape bucket per batch size and rounded capacity
            rows_per_bucket = max(1, self.batch_size // p.n) * p.n  # as `generate` cuts batches
            graph = self._bucket(rows_per_bucket, capacity_for(ids.shape[1] + budget), device)
            graph.load(cache, mask, pos[:, -1:] + 1, len(rows), p.n)
        elif p.n > 1:
            cache.batch_repeat_interleave(p.n)
        if p.n > 1:
            logits = logits.repeat_interleave(p.n, dim=0)
            mask = mask.repeat_interleave(p.n, dim=0)
            pos = pos.repeat_interleave(p.n, dim=0)
        sync_every = self.sync_every or default_sync_every(device)
        prefill = (cache, logits, mask, pos)
        keep = None if self.store is None or graph is not None else partial(store_rows, self.store, rows, p.n)
        # a sliding-window layer's cache drops its oldest positions, the shared ones first
        once = graph is None and self.full_attention and reads_shared_kv(self.model)
        shared_kv = shared if once else 0
        frozen = graph is None and reads_shared_kv(self.model) and freeze_pays(cache)
        loop = DecodeLoop(
            self, p, gen, device, limits, budget, sync_every, prefill, graph, abort, keep, shared_kv, frozen
        )
        started = now(device)
        if graph is None:
            return self._counted_decode(loop, started, device)
        try:
            return self._counted_decode(loop, started, device)
        except torch._dynamo.exc.TorchDynamoException as err:  # no compiler, an unsupported op, ...
            first = (str(err).strip().splitlines() or [""])[0]
            log.warning(
                "rollout.compile: the decode step did not compile (%s: %s); decoding uncompiled from now on",
                type(err).__name__,
                first[:200],
            )
            self.compile_decode, self.buckets = False, {}
            return self._generate_batch(rows, p, gen, device, limits, abort)

    def _count_prefill(
        self, mask: torch.Tensor, shared: int, start: int, started: float, device: torch.device
    ) -> None:
        """Prefill's work: the shared columns once, then the columns after the first `start` (shared
        and cached) for every row."""
        c = self.work
        c.prefill_tokens += shared + mask.shape[0] * (mask.shape[1] - start)
        c.prefill_new_tokens += shared + int(mask[:, start:].sum())
        c.prefill_s += now(device) - started

    def _counted_decode(self, loop: DecodeLoop, started: float, device: torch.device) -> Generation:
        try:
            return loop.run()
        finally:
            self.work.decode_s += now(device) - started

    def _prefill(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        budget: int,
        shared: int = 0,
        restored: Restored | None = None,
    ) -> tuple[Any, torch.Tensor]:
        """Run the prompts once: their KV cache and the logits of their last position, laid out by
        `prefix.prefix_layout`. `shared`: the first columns hold the same tokens in every row; they
        are run for one row and their keys and values copied to the others. `restored`: each row's
        entry from the prefix store, whose keys and values fill the cached block."""
        # room for the prompt and the whole budget (the last sampled token is never fed back: one spare);
        # the compiled path decodes in its own buffers, so its prefill cache holds the prompt only
        room = ids.shape[1] + (0 if self.compile_decode else budget)
        cache = preallocated_cache(self.model, room) if self.preallocate else None
        if shared:
            head = self.model(
                input_ids=ids[:1, :shared],
                attention_mask=mask[:1, :shared],
                position_ids=pos[:1, :shared],
                **cache_kw(cache),
                use_cache=True,
                logits_to_keep=1,
            )
            cache = cache_of(head)
        start = shared
        if restored is not None and restored.width(shared):
            start = shared + restored.width(shared)
            cache = restored.fill(cache if shared else None, preallocated_cache(self.model, room), shared)
        elif shared:
            cache.batch_repeat_interleave(ids.shape[0])
        # The last position by index, not `logits_to_keep=1`: the slice is a strided (B, 1, H) view, for
        # which torch's CPU linear copies the head's weight once per row (bf16, 16 rows: 1.2 s, not 6 ms)
        last = torch.tensor([ids.shape[1] - start - 1], device=ids.device)
        out = self.model(
            input_ids=ids[:, start:],
            attention_mask=mask,
            position_ids=pos[:, start:],
            **cache_kw(cache),
            use_cache=True,
            logits_to_keep=last,
        )
        return cache_of(out), out.logits[:, -1, :]

    def _apply_stops(
        self,
        tokens: torch.Tensor,
        length: torch.Tensor,
        alive: torch.Tensor,
        done: torch.Tensor,
        window_start: int,
        stops: list[str],
        stopped: dict[int, int],
    ) -> torch.Tensor:
        """Cut rows whose tokens since the last sync complete a stop string; mark them done."""
        lengths = length.tolist()
        done = done.clone()
        for j, r in enumerate(alive.tolist()):
            if r in stopped or lengths[r] <= window_start:
                continue  # cut before, or finished before this window
            k = self._first_stop(tokens[r, : lengths[r]].tolist(), window_start, stops)
            if k is not None:
                stopped[r] = k
                done[j] = True
        return done
