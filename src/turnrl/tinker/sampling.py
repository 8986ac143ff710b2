"""A sampling session's `sample` (and `compute_logprobs`, which is a sample asking for the prompt's
log-probs): turnrl's `HFEngine` on the base model with the session's adapter snapshot applied.

`plan` turns the SDK's `SampleRequest` into the engine's parameters in the route, so a bad field is a
one-line 4xx before anything is queued; `sample_many` runs on the worker thread, for the jobs
`sample_batch` groups into one engine call.

Log-probs: each sampled token's is the engine's, log p(token) at the sampling temperature before
top-p/top-k (what turnrl's trainer scores against); prompt log-probs come from one plain forward pass
over the prompt at temperature 1, NaN (None in the SDK) at position 0, which has no context, and,
with `prompt_logprobs_last_n`, everywhere before the last n tokens.

Stops, in the SDK's terms: `stop` None stops at EOS; `[]` never stops before `max_tokens`; strings
stop after the token that completes one (and at EOS); token ids stop at those tokens only.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch

from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.inference.common import sampling as checked_sampling
from turnrl.servers.inference.common import short
from turnrl.servers.refusal import Refusal
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.protobuf import encode_sample
from turnrl.tinker.wire import SamplingParamsIn, unknown_field


@dataclass(frozen=True)
class SamplePlan:
    prompt: list[int]
    params: SamplingParams
    stop_tokens: list[int] | None
    """Stop at exactly these token ids (instead of EOS); None: EOS (unless `params.ignore_eos`)."""
    prompt_logprobs: bool
    last_n: int | None


@dataclass(frozen=True)
class SampleLimits:
    max_num_samples: int = 128
    max_tokens: int = 1 << 20
    """Prompt tokens + num_samples x max_tokens of one request."""


def check_token_ids(ids: list[Any], vocab_size: int, where: str) -> None:
    """A Refusal naming the first of `ids` that is no token id of the model."""
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise Refusal(f"{where}: {short(t)} is not a token id in [0, {vocab_size})")


def prompt_tokens(prompt: dict[str, Any], vocab_size: int) -> list[int]:
    """The token ids of the SDK's `ModelInput` JSON (`{"chunks": [{"type": "encoded_text", ...}]}`)."""
    for key in prompt:
        if key != "chunks":
            raise unknown_field(f"prompt.{key}", ["chunks"])
    chunks = prompt.get("chunks")
    if not isinstance(chunks, list):
        raise Refusal("prompt.chunks: must be a list of token chunks")
    tokens: list[int] = []
    for j, chunk in enumerate(chunks):
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        if kind != "encoded_text":
            raise Refusal(f"prompt.chunks[{j}]: {short(kind)} chunks are not supported (token chunks only)")
        for key in chunk:
            if key not in ("type", "tokens"):
                raise unknown_field(f"prompt.chunks[{j}].{key}", ["tokens", "type"])
        ids = chunk.get("tokens")
        if not isinstance(ids, list):
            raise Refusal(f"prompt.chunks[{j}].tokens: must be a list of token ids")
        check_token_ids(ids, vocab_size, f"prompt.chunks[{j}].tokens")
        tokens.extend(ids)
    if not tokens:
        raise Refusal("prompt: no tokens")
    return tokens


def plan(
    prompt: list[int],
    num_samples: int,
    sp: SamplingParamsIn,
    prompt_logprobs: bool,
    last_n: int | None,
    max_context: int | None,
    limits: SampleLimits,
    vocab_size: int,
) -> SamplePlan:
    """The engine's parameters for one `SampleRequest`, or a Refusal naming the field."""
    if not 1 <= num_samples <= limits.max_num_samples:
        raise Refusal(f"num_samples: must be in [1, {limits.max_num_samples}] (--max-num-samples), got {short(num_samples)}")  # fmt: skip
    if sp.max_tokens is None:
        raise Refusal("sampling_params.max_tokens: required by this server (how many tokens to sample)")
    stop, stop_tokens = sp.stop, None
    if isinstance(stop, list) and stop and all(isinstance(s, int) for s in stop):
        check_token_ids(stop, vocab_size, "sampling_params.stop")
        stop_tokens, stop = [int(s) for s in stop], None
    try:
        params = checked_sampling(
            max_tokens=sp.max_tokens,
            n=num_samples,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=sp.top_k,
            stop=stop,  # type: ignore[arg-type]  # ints were taken out above
            seed=sp.seed,
            ignore_eos=stop == [],
        )
    except Refusal as err:  # the shared checks name the field as the OpenAI API does
        raise Refusal(f"sampling_params.{err}", err.status) from None
    if max_context and len(prompt) + params.max_new_tokens > max_context:
        raise Refusal(f"sampling_params.max_tokens: {len(prompt)} prompt tokens + {params.max_new_tokens} exceed the model's context of {max_context}")  # fmt: skip
    total = len(prompt) + num_samples * params.max_new_tokens
    if total > limits.max_tokens:
        raise Refusal(f"num_samples: {len(prompt)} prompt tokens + {num_samples} x {params.max_new_tokens} = {total} tokens exceed this server's {limits.max_tokens} (--max-sample-tokens)", 413)  # fmt: skip
    if last_n is not None and (not prompt_logprobs or not 1 <= last_n <= len(prompt) - 1):
        raise Refusal(f"prompt_logprobs_last_n: must be in [1, {len(prompt) - 1}] with prompt_logprobs, got {short(last_n)}")  # fmt: skip
    return SamplePlan(prompt, params, stop_tokens, prompt_logprobs, last_n)


def prompt_logprobs(net: torch.nn.Module, prompt: list[int], last_n: int | None) -> list[float]:
    """log p(prompt[t] | prompt[:t]) from one forward pass; NaN at 0 and before the last `last_n`."""
    ids = torch.tensor([prompt], device=next(net.parameters()).device)
    with torch.no_grad():
        logits = net(input_ids=ids).logits[0, :-1].float()
    scored = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()
    out = [math.nan, *scored]
    if last_n is not None:
        out[: len(prompt) - last_n] = [math.nan] * (len(prompt) - last_n)
    return out


NOT_FINITE = "sampling_session_id: the sampler's weights make the model's outputs NaN or infinite (a checkpoint of a diverged run?); nothing was sampled"  # fmt: skip


def _finite_outputs(net: torch.nn.Module, prompt: list[int]) -> bool:
    ids = torch.tensor([prompt], device=next(net.parameters()).device)
    with torch.no_grad():
        return bool(torch.isfinite(net(input_ids=ids).logits[0, -1]).all())


def batch_key(adapter: str | None, job: SamplePlan) -> tuple[Any, ...] | None:
    """What jobs must share to run in one engine call: the adapter and every sampling setting but the
    token budget (each row keeps its own). None for a job with a seed: its draws must be its own."""
    p = job.params
    if p.seed is not None:
        return None
    stops = None if job.stop_tokens is None else tuple(job.stop_tokens)
    return (adapter, p.n, p.temperature, p.top_p, p.top_k, tuple(p.stop), p.ignore_eos, stops)


def sample_many(
    backbone: Backbone, engine: HFEngine, adapter: str | None, jobs: list[SamplePlan]
) -> list[bytes]:
    """Jobs of one `batch_key` in one engine call per `shared_prompts` group (their prompts batched,
    each distinct prompt prefilled once, each row its own budget), one `SampleResponse` each. An adapter whose outputs are NaN or infinite is a user error (its
    weights came from the client)."""
    from turnrl.tinker.training import all_finite

    if adapter is not None and not all_finite(list(backbone.parameters(adapter))):
        raise Refusal(NOT_FINITE)
    first = jobs[0]
    if adapter is not None:  # a sampler's frozen adapter, merged into a copy of the base
        merged = backbone.merged(adapter)
        engine, context = HFEngine(merged, backbone.tokenizer, engine.batch_size), nullcontext(merged)
    else:
        context = backbone.active(None)
    samples: dict[int, list[tuple[list[int], list[float], str]]] = {}
    with context as net:
        saved = engine.eos_ids
        if first.stop_tokens is not None:
            engine.eos_ids = set(first.stop_tokens)
        try:
            for order, copies in shared_prompts(jobs):
                samples.update(_sample_shared(engine, [jobs[k] for k in order], order, copies))
        except RuntimeError:  # e.g. NaN probabilities past a finite but huge adapter: say so
            if adapter is not None and not all(_finite_outputs(net, j.prompt) for j in jobs):
                raise Refusal(NOT_FINITE) from None
            raise
        finally:
            engine.eos_ids = saved
        prompt_lps = [prompt_logprobs(net, j.prompt, j.last_n) if j.prompt_logprobs else None for j in jobs]
    return [encode_sample(samples[k], lp) for k, lp in enumerate(prompt_lps)]


def _sample_shared(
    engine: HFEngine, jobs: list[SamplePlan], keys: list[int], copies: int
) -> dict[int, list[tuple[list[int], list[float], str]]]:
    """One engine call for `jobs`, whose prompts come `copies` at a time (A,A,B,B): each distinct prompt
    prefilled once with `copies` x n samples, as `turnrl train` samples a group; each job's own rows
    (and budget) back under its key."""
    n = jobs[0].params.n
    params = replace(jobs[0].params, n=n * copies, max_new_tokens=max(j.params.max_new_tokens for j in jobs))
    limits = [j.params.max_new_tokens for j in jobs for _ in range(n)]
    gen = engine.generate([j.prompt for j in jobs[::copies]], params, max_new_tokens_per_row=limits)
    rows = list(zip(gen.response_ids, gen.log_probs, gen.finish_reasons, strict=True))
    return {key: rows[i * n : (i + 1) * n] for i, key in enumerate(keys)}


def shared_prompts(jobs: list[SamplePlan]) -> list[tuple[list[int], int]]:
    """The engine calls for `jobs`: the jobs of the distinct prompts that are asked the same number of
    times c, each prompt's jobs next to each other, with c. tinker-cookbook's RL loop asks each sample
    of a group as its own request, so most of a step's requests share their prompt with `group_size - 1`
    others; a request that came alone before the rest only splits off a small call of its prompt's.
    Hand-worked: prompts [A, B, A, B] -> [([0, 2, 1, 3], 2)]; [A, A, B] -> [([0, 1], 2), ([2], 1)]."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for k, job in enumerate(jobs):
        by_prompt.setdefault(tuple(job.prompt), []).append(k)
    by_count: dict[int, list[int]] = {}
    for keys in by_prompt.values():
        by_count.setdefault(len(keys), []).extend(keys)
    return [(keys, copies) for copies, keys in by_count.items()]
