"""`forward_backward` over data that share their prompts: each distinct prompt runs once.

An RL step's data are groups of samples of one prompt: the prompt's tokens carry no loss (weight 0,
or advantage 0 for the losses proportional to it), only the sampled tokens do. Run datum by datum,
every sample pays for its prompt's forward and backward again: with tinker-cookbook's RL loop on the
addition task, 91 prompt tokens for 17 sampled ones. Here the tokens before a datum's first one that
carries loss (`silent_prefix`) are its prompt; each distinct prompt goes through the trunk once, with
gradients, its keys and values copied to its samples (the copy is differentiable, so the gradient of
every sample reaches the one prompt pass), and only the rest of each datum runs per sample. The
prompt positions' log-probs are computed from the prompt pass too, detached: they carry no loss, so
the loss and every gradient are those of the datum-by-datum pass (a test compares them).
"""

from __future__ import annotations

import torch

from turnrl.models.cache_name import cache_kw, cache_of
from turnrl.models.logprobs import prompt_groups
from turnrl.tensors import position_ids_from_mask
from turnrl.tinker.protobuf import DatumIn

PROPORTIONAL_TO_ADVANTAGE = ("importance_sampling", "ppo", "cispo")
"""Losses whose token term is a multiple of its advantage: a token with advantage 0 carries none."""


def silent_prefix(datum: DatumIn, loss_fn: str) -> int:
    """How many leading positions carry no loss and no gradient: weight 0 (every loss multiplies its
    token term by the weight, and GSPO's sequence mean skips weight 0), or advantage 0 for the losses
    proportional to it. 0 when `target_tokens` is (N, K) (top-K cross-entropy keeps the plain pass)."""
    if datum.inputs["target_tokens"].ndim != 1:
        return 0
    n = len(datum.tokens)
    silent = torch.zeros(n, dtype=torch.bool)
    if "weights" in datum.inputs:
        silent |= torch.as_tensor(datum.inputs["weights"]) == 0
    if loss_fn in PROPORTIONAL_TO_ADVANTAGE and "advantages" in datum.inputs:
        silent |= torch.as_tensor(datum.inputs["advantages"]) == 0
    loud = (~silent).nonzero()
    return int(loud[0]) if len(loud) else n - 1  # a datum all silent keeps its last position its own


def grouped_target_logprobs(
    net: torch.nn.Module, data: list[DatumIn], splits: list[int], device: torch.device
) -> list[torch.Tensor]:
    """Each datum's log p(target) at every position, (N,), its first `splits[i]` positions (at least 1)
    run once per distinct prompt and detached, the rest with gradients through the prompt's pass."""
    b = len(data)
    prompts = [d.tokens[:s] for d, s in zip(data, splits, strict=True)]
    rests = [d.tokens[s:] for d, s in zip(data, splits, strict=True)]
    width_p, width_r = max(map(len, prompts)), max(map(len, rests))
    ids = torch.zeros((b, width_p + width_r), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompts, rests, strict=True)):
        ids[i, width_p - len(p) : width_p] = torch.tensor(p)  # prompts left-padded: they end together
        mask[i, width_p - len(p) : width_p] = 1
        ids[i, width_p : width_p + len(r)] = torch.tensor(r)  # the rest right-padded after them
        mask[i, width_p : width_p + len(r)] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = position_ids_from_mask(mask)
    first, expand = (g.to(device) for g in prompt_groups(torch.cat([ids[:, :width_p], mask[:, :width_p]], 1)))
    trunk, head = net.get_decoder(), net.get_output_embeddings()
    p_out = trunk(input_ids=ids[first, :width_p], attention_mask=mask[first, :width_p],
                  position_ids=pos[first, :width_p], use_cache=True)  # fmt: skip
    cache = cache_of(p_out)
    cache.batch_select_indices(expand)  # differentiable: every sample's gradient reaches the prompt pass
    r_out = trunk(input_ids=ids[:, width_p:], attention_mask=mask, position_ids=pos[:, width_p:],
                  **cache_kw(cache), use_cache=True)  # fmt: skip
    with torch.no_grad():
        prompt_logp = torch.log_softmax(head(p_out.last_hidden_state).float(), dim=-1)[expand]
    out = []
    for i, (d, s) in enumerate(zip(data, splits, strict=True)):
        targets = torch.as_tensor(d.inputs["target_tokens"], dtype=torch.long, device=device)
        rest = torch.log_softmax(head(r_out.last_hidden_state[i, : len(rests[i])]).float(), dim=-1)
        before = prompt_logp[i, width_p - s :].gather(-1, targets[:s, None]).squeeze(-1)
        after = rest.gather(-1, targets[s:, None]).squeeze(-1)
        out.append(torch.cat([before, after]))
    return out
