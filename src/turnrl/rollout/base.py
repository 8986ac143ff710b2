"""The rollout contracts, written so that an engine may live in another process.

- `RolloutEngine`: prompt ids in, response ids + their log-probs + the policy version out.
  Engines never decode and re-encode: the ids they return are exactly the sampled ones, so
  the trainer scores the same tokens the policy produced. Everything crossing this boundary
  is plain data (lists of ints and floats, a dataclass of sampling parameters).
- `Rollout`: a prompt `Batch` in, the step's rollout fields out (single-turn or agent);
  it drives an engine and is what the trainer's `gen` stage calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from turnrl.batch import Batch
from turnrl.tensors import left_pad, position_ids_from_mask


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
    ignore_eos: bool = False
    """Never stop at EOS: every row runs to its budget (benchmarks)."""


@dataclass
class Generation:
    response_ids: list[list[int]]
    log_probs: list[list[float]]
    """log p(token) under the sampling temperature, before top-p/top-k truncation."""
    finish_reasons: list[str]
    """'stop' (EOS or stop string) or 'length'; 'abort' only for rows an engine's `abort` callback
    stopped (a server's client that left: nobody reads them)."""
    policy_version: int = 0
    """Version of the weights that sampled these tokens (0 = the start policy, +1 per actor update);
    the oldest one when rows differ."""
    token_versions: list[list[int]] | None = None
    """Per row and token, the version that sampled it, where they differ (a batch or an agent episode
    that straddles a weight update in async mode); None = every token is `policy_version`."""

    def versions_of(self, row: int) -> list[int]:
        if self.token_versions is not None:
            return self.token_versions[row]
        return [self.policy_version] * len(self.response_ids[row])


def row_limits(
    prompt_ids: list[list[int]], params: SamplingParams, max_new_tokens_per_row: list[int] | None
) -> list[int]:
    """Every engine's reading of `max_new_tokens_per_row`: one budget >= 1 per output row
    (`len(prompt_ids) * params.n`), or `params.max_new_tokens` for all when None."""
    rows = len(prompt_ids) * params.n
    limits = max_new_tokens_per_row or [params.max_new_tokens] * rows
    if len(limits) != rows or min(limits, default=1) < 1:
        raise ValueError(f"max_new_tokens_per_row needs {rows} values >= 1, got {max_new_tokens_per_row}")
    return limits


class RolloutEngine(Protocol):
    """Samples responses. One output row per (prompt, sample): `len(prompt_ids) * params.n` rows,
    interleaved A,A,B,B."""

    eos_ids: set[int]
    """Token ids that end a response (the tokenizer's EOS and the model's generation config)."""

    max_lag: int
    """How many policy versions the tokens of one batch may span: 0 (the default) keeps a batch on
    one version; async training with `trainer.max_staleness` k sets k, so a response may start
    before a weight update and end after it. An engine that cannot mix versions ignores it."""

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation:
        """`max_new_tokens_per_row`: one budget per output row, each <= `params.max_new_tokens`
        (multi-turn episodes of one batch have different budgets left); None = all the same."""
        ...

    def sync_weights(self, version: int) -> None:
        """Take the actor's weights of policy version `version` (a no-op for an engine that samples
        from the actor's own module; a server engine loads them)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    """A server a rollout's tools use, that rewards may use too: its URL and key ('' = none)."""

    url: str
    api_key: str = ""


@dataclass(frozen=True)
class Services:
    """The servers a rollout started or checked for its tools, handed to whatever else needs them
    where the run is assembled (code rewards run programs in the python tool's sandbox)."""

    sandbox: Endpoint | None = None
    retriever: Endpoint | None = None
    workspace: Endpoint | None = None
    """The sandbox of the episodes' sessions (the `bash` and `editor` tools)."""


class Rollout(Protocol):
    """Stage 3: sample `params.n` responses per prompt of a generation batch (single-turn or agent).

    Returns the fields of `assemble` (responses, masks, `rollout_log_probs`,
    `rollout_policy_version`, ...) and the rollout's metrics."""

    engine: RolloutEngine
    """What samples (a server engine's `counters()` reach the step's metrics)."""
    services: Services
    """The tool servers it runs or uses."""
    wants_rows: bool
    """Stage 2 lends it the rows' own fields (an agent function reads its row)."""

    def generate(self, gen_batch: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]: ...

    def close(self) -> None: ...


def assemble(prompts: Batch, gen: Generation, n: int, pad_id: int, response_length: int) -> Batch:
    """Rollout output as the step's tensors: prompt (repeated n) + right-padded responses.

    `response_length` fixes the response width so batches from different steps line up.
    """
    rep = prompts.repeat(n, interleave=True)
    b = len(rep)
    responses = torch.full((b, response_length), pad_id, dtype=torch.long)
    response_mask = torch.zeros((b, response_length), dtype=torch.float32)
    logps = torch.zeros((b, response_length), dtype=torch.float32)
    token_versions = torch.full((b, response_length), gen.policy_version, dtype=torch.long)
    for i, (ids, lps) in enumerate(zip(gen.response_ids, gen.log_probs, strict=True)):
        k = min(len(ids), response_length)
        responses[i, :k] = torch.tensor(ids[:k], dtype=torch.long)
        response_mask[i, :k] = 1.0
        logps[i, :k] = torch.tensor(lps[:k], dtype=torch.float32)
        if gen.token_versions is not None and k:
            token_versions[i, :k] = torch.tensor(gen.token_versions[i][:k], dtype=torch.long)
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
            # a row's version is its oldest token's: what staleness is measured by
            "rollout_policy_version": oldest_version(token_versions, response_mask, gen.policy_version),
            "rollout_token_versions": token_versions,
        },
        non_tensors={"finish_reason": gen.finish_reasons},
    )
    return out


def oldest_version(versions: torch.Tensor, mask: torch.Tensor, default: int) -> torch.Tensor:
    """Per row, the smallest version over its tokens (`default` for a row without tokens)."""
    big = torch.iinfo(torch.long).max
    oldest = versions.masked_fill(mask == 0, big).min(dim=-1).values
    return torch.where(oldest == big, torch.full_like(oldest, default), oldest)


__all__ = [
    "Generation",
    "Rollout",
    "RolloutEngine",
    "SamplingParams",
    "assemble",
    "left_pad",
    "oldest_version",
]
