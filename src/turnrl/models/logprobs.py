"""Per-token log-probabilities without a full-vocabulary float32 log-softmax for the batch.

The trunk gives hidden states; the output head is applied to response positions only,
in chunks of `chunk_size` tokens.

Samples of one prompt share it: `shared_prefix_log_probs` runs each distinct prompt through
the trunk once and copies its KV cache to its samples, so a group of n responses costs one
prompt plus n responses instead of n prompts plus n responses. Gradients flow through the
copies into the single prompt pass, so the result and its gradient equal the plain forward. With gradients, each chunk is checkpointed so backward
recomputes its logits instead of keeping (tokens x vocab) floats alive: peak memory is
one chunk's logits, whatever the batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def _trunk_and_head(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    # PeftModel forwards attribute access to the wrapped model; LoRA layers live inside the trunk
    return model.get_decoder(), model.get_output_embeddings()


def _chunk_stats(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    probs = torch.softmax(logits, dim=-1)
    entropy = lse - (probs * logits).sum(-1)
    return logp, entropy


def _head_log_probs(
    head: torch.nn.Module, h: torch.Tensor, labels: torch.Tensor, temperature: float, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """h: (B, R, H) hidden states that predict labels (B, R)."""
    shape = labels.shape
    h, labels = h.reshape(-1, h.shape[-1]), labels.reshape(-1)
    out_lp, out_ent = [], []
    for start in range(0, h.shape[0], chunk_size):
        hs, ls = h[start : start + chunk_size], labels[start : start + chunk_size]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(
                _chunk_stats, hs, head.weight, head.bias, ls, temperature, use_reentrant=False
            )
        else:
            lp, ent = _chunk_stats(hs, head.weight, head.bias, ls, temperature)
        out_lp.append(lp)
        out_ent.append(ent)
    return torch.cat(out_lp).view(shape), torch.cat(out_ent).view(shape)


def prompt_runs(prompts: torch.Tensor) -> torch.Tensor:
    """Start row of each run of identical consecutive prompts (a group of samples)."""
    if prompts.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long)
    differs = (prompts[1:] != prompts[:-1]).any(dim=1)
    return torch.cat([torch.zeros(1, dtype=torch.long), differs.nonzero().flatten() + 1])


def shared_prefix_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as `response_log_probs`, computing each distinct prompt once."""
    r = response_length
    prompt_ids, prompt_mask = input_ids[:, :-r], attention_mask[:, :-r]
    starts = prompt_runs(torch.cat([prompt_ids, prompt_mask], dim=1))
    rows = len(input_ids)
    if len(starts) == rows:  # nothing shared
        return response_log_probs(model, input_ids, attention_mask, position_ids, r, temperature, chunk_size)
    trunk, head = _trunk_and_head(model)
    counts = torch.diff(torch.cat([starts, torch.tensor([rows])]))
    p_out = trunk(
        input_ids=prompt_ids[starts],
        attention_mask=prompt_mask[starts],
        position_ids=position_ids[starts, :-r],
        use_cache=True,
    )
    cache = p_out.past_key_values
    expand = torch.repeat_interleave(torch.arange(len(starts)), counts).to(input_ids.device)
    cache.batch_select_indices(expand)  # index_select: differentiable, one copy per sample
    last_prompt_hidden = p_out.last_hidden_state[:, -1:, :][expand]
    r_out = trunk(
        input_ids=input_ids[:, -r:],
        attention_mask=attention_mask,
        position_ids=position_ids[:, -r:],
        past_key_values=cache,
        use_cache=True,
    )
    # token t of the response is predicted by the hidden state just before it
    h = torch.cat([last_prompt_hidden, r_out.last_hidden_state[:, :-1, :]], dim=1)
    return _head_log_probs(head, h, input_ids[:, -r:], temperature, chunk_size)


def response_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_probs, entropy), each (B, response_length), of the last `response_length` tokens.

    The token at column t is predicted by the hidden state at column t-1, so we keep the
    hidden states of the R positions before each response token.
    """
    trunk, head = _trunk_and_head(model)
    hidden = trunk(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    ).last_hidden_state
    r = response_length
    return _head_log_probs(head, hidden[:, -r - 1 : -1, :], input_ids[:, -r:], temperature, chunk_size)
