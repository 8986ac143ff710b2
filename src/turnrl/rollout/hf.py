"""Rollout with a transformers model: a batched sampling loop over the KV cache.

We run our own loop instead of `model.generate` to get, at no extra memory, the
log-prob of each sampled token at the sampling temperature, exact per-row stopping on
EOS or stop strings, and rows dropped from the batch as soon as they finish.
"""

from __future__ import annotations

from typing import Any

import torch

from turnrl.data.dataset import left_pad, position_ids_from_mask
from turnrl.rollout.base import Generation, SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to -inf; always keep the best token."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        # drop a token if the mass before it already exceeds top_p
        drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) > top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


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


class HFEngine:
    """Samples from the actor's own module, in the actor's process: its weights are always the
    actor's current ones, so `sync_weights` only records the version."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_ids = eos_ids(model, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id)
        self.version = 0

    def sync_weights(self, version: int) -> None:
        self.version = version

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation:
        """`max_new_tokens_per_row` (one per output row, at most `params.max_new_tokens`) lets rows of
        one batch stop at different budgets, as multi-turn episodes need."""
        rows = len(prompt_ids) * params.n
        limits = max_new_tokens_per_row or [params.max_new_tokens] * rows
        if len(limits) != rows or min(limits, default=1) < 1:
            raise ValueError(f"max_new_tokens_per_row needs {rows} values >= 1, got {max_new_tokens_per_row}")
        device = next(self.model.parameters()).device
        gen = torch.Generator(device=device)
        gen.manual_seed(params.seed if params.seed is not None else torch.seed() % 2**63)
        out = Generation([], [], [], policy_version=self.version)
        prompts_per_batch = max(1, self.batch_size // params.n)
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompt_ids), prompts_per_batch):
                part = self._generate_batch(
                    prompt_ids[start : start + prompts_per_batch],
                    params,
                    gen,
                    device,
                    limits[start * params.n : (start + prompts_per_batch) * params.n],
                )
                out.response_ids += part.response_ids
                out.log_probs += part.log_probs
                out.finish_reasons += part.finish_reasons
        finally:
            self.model.train(was_training)
        return out

    def _stopped_by_string(self, ids: list[int], stops: list[str]) -> bool:
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stops)

    def _generate_batch(
        self,
        rows: list[list[int]],
        p: SamplingParams,
        gen: torch.Generator,
        device: torch.device,
        limits: list[int],
    ) -> Generation:
        ids, mask = left_pad(rows, self.pad_id)
        ids, mask = ids.to(device), mask.to(device)
        pos = position_ids_from_mask(mask)
        # prefill each prompt once, then copy its KV cache for its n samples (A,A,B,B)
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        if p.n > 1:
            cache.batch_repeat_interleave(p.n)
            logits = logits.repeat_interleave(p.n, dim=0)
            mask = mask.repeat_interleave(p.n, dim=0)
            pos = pos.repeat_interleave(p.n, dim=0)
        b = len(rows) * p.n
        responses: list[list[int]] = [[] for _ in range(b)]
        logps: list[list[float]] = [[] for _ in range(b)]
        reasons = ["length"] * b
        alive = torch.arange(b, device=device)  # batch rows still generating -> output row
        next_pos = pos[:, -1:] + 1
        for step in range(min(p.max_new_tokens, max(limits))):
            logits = logits.float()
            if p.temperature <= 0:
                token = logits.argmax(-1)
                lp = torch.log_softmax(logits, -1).gather(-1, token[:, None]).squeeze(-1)
            else:
                scaled = logits / p.temperature
                logp_all = torch.log_softmax(scaled, -1)
                probs = torch.softmax(filter_logits(scaled, p.top_k, p.top_p), -1)
                token = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                lp = logp_all.gather(-1, token[:, None]).squeeze(-1)
            keep: list[int] = []
            for j, (r, t, v) in enumerate(zip(alive.tolist(), token.tolist(), lp.tolist(), strict=True)):
                responses[r].append(t)
                logps[r].append(v)
                if t in self.eos_ids or (p.stop and self._stopped_by_string(responses[r], p.stop)):
                    reasons[r] = "stop"
                elif len(responses[r]) < limits[r]:
                    keep.append(j)
            if not keep or step == p.max_new_tokens - 1:
                break
            if len(keep) < len(alive):  # drop finished rows from the batch and the cache
                sel = torch.tensor(keep, device=device)
                alive, token, mask, next_pos = alive[sel], token[sel], mask[sel], next_pos[sel]
                cache.batch_select_indices(sel)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_pos,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1
        return Generation(responses, logps, reasons)
