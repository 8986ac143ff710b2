"""The k most likely tokens at each position of sampled responses, for chat's `top_logprobs`.

The engine keeps only the sampled tokens' log-probs (what training needs, at no extra memory), so
the alternatives come from one more forward pass over prompt + response, on the batcher's worker
thread (the engine's owner), after the generation. They are the engine's quantity: log-softmax of
the logits at the sampling temperature (temperature 0: of the raw logits), before top-p/top-k.

A response is fed in chunks with the KV cache, so no more than `chunk` x vocab logits are held at
once, whatever its length. The sampled token's entry, when it is among the k, carries the engine's
own log-prob, so that `logprob` and its `top_logprobs` entry agree to the bit (a separate forward
differs in the last float bits).
"""

from __future__ import annotations

from typing import Any

import torch

from turnrl.models.cache_name import cache_kw, cache_of
from turnrl.servers.chat.response import TopLogprobs


@torch.no_grad()
def top_logprobs(
    model: Any,
    prompt: list[int],
    response: list[int],
    temperature: float,
    k: int,
    sampled_logprobs: list[float] | None = None,
    chunk: int = 256,
) -> TopLogprobs:
    """The k most likely tokens before each token of `response`, given `prompt` and the response
    so far. `sampled_logprobs`: the engine's log-prob of each response token (see the module)."""
    if not response or k < 1:
        return [[] for _ in response]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        cache = None
        if len(prompt) > 1:  # everything before the last prompt token: its logits are never needed
            out = model(
                input_ids=torch.tensor([prompt[:-1]], device=device), use_cache=True, logits_to_keep=1
            )
            cache = cache_of(out)
        # the logits at the last prompt token and at each response token but the last predict the response
        rest = [prompt[-1], *response[:-1]]
        found: TopLogprobs = []
        for start in range(0, len(rest), chunk):
            piece = torch.tensor([rest[start : start + chunk]], device=device)
            out = model(input_ids=piece, **cache_kw(cache), use_cache=True)
            cache = cache_of(out)
            logits = out.logits[0].float()
            if temperature > 0:
                logits = logits / temperature
            values, ids = torch.log_softmax(logits, -1).topk(min(k, logits.shape[-1]), dim=-1)
            found += [
                list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)
            ]
    finally:
        model.train(was_training)
    if sampled_logprobs is not None:
        found = [
            [(t, lp if t == token else v) for t, v in row]
            for row, token, lp in zip(found, response, sampled_logprobs, strict=True)
        ]
    return found
