"""Per-token log-probabilities without a full-vocabulary float32 log-softmax for the batch.

The trunk gives hidden states; the output head is applied to response positions only,
in chunks of `chunk_size` tokens. With gradients, each chunk is checkpointed so backward
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
    h = hidden[:, -r - 1 : -1, :].reshape(-1, hidden.shape[-1])
    labels = input_ids[:, -r:].reshape(-1)
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
    shape = (input_ids.shape[0], r)
    return torch.cat(out_lp).view(shape), torch.cat(out_ent).view(shape)
