"""The rollout engine's contract: prompt ids in, response ids and their log-probs out.

Engines never decode and re-encode: the ids they return are exactly the sampled ones, so
the trainer scores the same tokens the policy produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from turnrl.batch import Batch
from turnrl.data.dataset import left_pad, position_ids_from_mask


@dataclass
class SamplingParams:
    max_new_tokens: int
    """Response budget in tokens."""
    n: int = 1
    """Samples per prompt; outputs are interleaved (A,A,B,B)."""
    temperature: float = 1.0
    """0 = greedy."""
    top_p: float = 1.0
    top_k: int = 0
    stop: list[str] = field(default_factory=list)
    """Stop strings; the ids up to and including the token that completes one are kept."""
    seed: int | None = None


@dataclass
class Generation:
    response_ids: list[list[int]]
    log_probs: list[list[float]]
    """log p(token) under the sampling temperature, before top-p/top-k truncation."""
    finish_reasons: list[str]
    """'stop' (EOS or stop string) or 'length'."""


class RolloutEngine(Protocol):
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> Generation: ...


def assemble(prompts: Batch, gen: Generation, n: int, pad_id: int, response_length: int) -> Batch:
    """Rollout output as the step's tensors: prompt (repeated n) + right-padded responses.

    `response_length` fixes the response width so batches from different steps line up.
    """
    rep = prompts.repeat(n, interleave=True)
    b = len(rep)
    responses = torch.full((b, response_length), pad_id, dtype=torch.long)
    response_mask = torch.zeros((b, response_length), dtype=torch.float32)
    logps = torch.zeros((b, response_length), dtype=torch.float32)
    for i, (ids, lps) in enumerate(zip(gen.response_ids, gen.log_probs, strict=True)):
        k = min(len(ids), response_length)
        responses[i, :k] = torch.tensor(ids[:k], dtype=torch.long)
        response_mask[i, :k] = 1.0
        logps[i, :k] = torch.tensor(lps[:k], dtype=torch.float32)
    prompt_mask = rep["attention_mask"]
    attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=1)
    out = Batch(
        tensors={
            "prompts": rep["input_ids"],
            "responses": responses,
            "input_ids": torch.cat([rep["input_ids"], responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": position_ids_from_mask(attention_mask),
            "response_mask": response_mask,
            "rollout_log_probs": logps,
        },
        non_tensors={"finish_reason": gen.finish_reasons},
    )
    return out


__all__ = ["Generation", "RolloutEngine", "SamplingParams", "assemble", "left_pad"]
