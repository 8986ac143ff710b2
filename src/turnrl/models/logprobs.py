"""Per-token log-probabilities (and values) without a full-vocabulary float32 log-softmax.

The trunk gives hidden states; a head is applied to the positions that predict response
tokens only. The vocabulary head runs in chunks of `chunk_size` tokens; with gradients and
more than `KEEP_LOGITS_BYTES` of them, each chunk is checkpointed so backward recomputes its
logits instead of keeping (tokens x vocab) floats alive: peak memory is one chunk's logits,
whatever the batch.

Samples of one prompt share it: with `share_prompts`, each distinct prompt goes through
the trunk once and its KV cache is copied to its samples, so a group of n responses costs
one prompt plus n responses instead of n prompts plus n responses. Gradients flow through
the copies into the single prompt pass, so values and gradients equal the plain forward.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from turnrl.models.cache_name import cache_kw, cache_of
from turnrl.models.precision import in_compute_dtype


def prompt_groups(prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, expand): the row of each distinct prompt's first appearance, in order of appearance,
    and for every row the index of its prompt among them. Rows of one prompt need not be adjacent:
    length-sorted micro-batches interleave the samples of different prompts."""
    n = prompts.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    _, inverse = torch.unique(prompts.cpu(), dim=0, return_inverse=True)
    rows = torch.arange(n)
    first_of = torch.full((int(inverse.max()) + 1,), n).scatter_reduce(0, inverse, rows, "amin")
    order = torch.argsort(first_of)  # unique() sorts by value; we want order of appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return first_of[order], rank[inverse]


def response_hidden(
    trunk: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    share_prompts: bool = True,
) -> torch.Tensor:
    """(B, R, H): the hidden state that predicts each of the last R tokens (the one before it)."""
    r = response_length
    prompt_ids, prompt_mask = input_ids[:, :-r], attention_mask[:, :-r]
    groups = prompt_groups(torch.cat([prompt_ids, prompt_mask], dim=1)) if share_prompts else None
    if groups is None or len(groups[0]) == len(input_ids):
        hidden = trunk(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return hidden[:, -r - 1 : -1, :]
    first, expand = (g.to(input_ids.device) for g in groups)
    p_out = trunk(
        input_ids=prompt_ids[first],
        attention_mask=prompt_mask[first],
        position_ids=position_ids[first, :-r],
        use_cache=True,
    )
    cache = cache_of(p_out)
    cache.batch_select_indices(expand)  # index_select: differentiable, one copy per sample
    last_prompt_hidden = p_out.last_hidden_state[:, -1:, :][expand]
    r_out = trunk(
        input_ids=input_ids[:, -r:],
        attention_mask=attention_mask,
        position_ids=position_ids[:, -r:],
        **cache_kw(cache),
        use_cache=True,
    )
    return torch.cat([last_prompt_hidden, r_out.last_hidden_state[:, :-1, :]], dim=1)


KEEP_LOGITS_BYTES = 512 * 2**20
"""Below this, a backward keeps the vocabulary-sized buffers instead of recomputing them (the default
step's micro-batch of 16 x 24 tokens needs ~230 MB)."""


def _chunk_stats(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _stats(torch.nn.functional.linear(hidden, weight, bias), labels, temperature)


def _module_chunk_stats(
    head: torch.nn.Module, hidden: torch.Tensor, labels: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _stats(head(hidden), labels, temperature)


def _stats(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float() / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    probs = torch.softmax(logits, dim=-1)
    entropy = lse - (probs * logits).sum(-1)
    return logp, entropy


def head_log_probs(
    head: torch.nn.Module, h: torch.Tensor, labels: torch.Tensor, temperature: float, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_probs, entropy) of labels (B, R) under the vocabulary head applied to h (B, R, H)."""
    shape = labels.shape
    h, labels = h.reshape(-1, h.shape[-1]), labels.reshape(-1)
    # recomputing each chunk's logits in backward costs one more head matmul; worth it only when
    # keeping every chunk's (logits, probabilities) alive would take real memory
    kept_bytes = 3 * h.shape[0] * head.weight.shape[0] * 4
    recompute = torch.is_grad_enabled() and kept_bytes > KEEP_LOGITS_BYTES
    # a head wrapped by an adapter (LoRA on the output layer) is called as a module: its weight alone
    # would leave the adapter out of the log-probs, and so out of training
    plain = type(head) is torch.nn.Linear
    out_lp, out_ent = [], []
    for start in range(0, h.shape[0], chunk_size):
        hs, ls = h[start : start + chunk_size], labels[start : start + chunk_size]
        if plain:
            args: tuple[Any, ...] = (_chunk_stats, hs, head.weight, head.bias, ls, temperature)
        else:
            args = (functools.partial(_module_chunk_stats, head), hs, ls, temperature)
        if recompute:
            lp, ent = checkpoint(*args, use_reentrant=False)
        else:
            lp, ent = args[0](*args[1:])
        out_lp.append(lp)
        out_ent.append(ent)
    return torch.cat(out_lp).view(shape), torch.cat(out_ent).view(shape)


def response_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_probs, entropy), each (B, response_length), of the last `response_length` tokens."""
    # PeftModel forwards attribute access to the wrapped model; LoRA layers live inside the trunk
    trunk, head = model.get_decoder(), model.get_output_embeddings()
    h = response_hidden(trunk, input_ids, attention_mask, position_ids, response_length, share_prompts)
    return head_log_probs(head, h, input_ids[:, -response_length:], temperature, chunk_size)


def shared_prefix_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`response_log_probs` computing each distinct prompt once."""
    return response_log_probs(
        model,
        input_ids,
        attention_mask,
        position_ids,
        response_length,
        temperature,
        chunk_size,
        share_prompts=True,
    )


def attach_log_prob_method(model: Any, compute: torch.dtype | None = None) -> None:
    """Make `response_log_probs` a method of the model itself (`model.response_log_probs(ids, ...)`),
    computing in `compute` through autocast (None: the parameters' own precision).

    The trunk and the vocabulary head are called separately, never through `model.forward`; a
    sharded model gathers its weights around registered forward methods, so this is the one
    the roles call, on 1 rank or N."""
    device = next(model.parameters()).device
    model.response_log_probs = types.MethodType(in_compute_dtype(response_log_probs, compute, device), model)
