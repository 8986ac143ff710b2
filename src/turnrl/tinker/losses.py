"""The tinker SDK's built-in losses (`forward_backward(data, loss_fn=...)`), per token.

Each loss maps one datum's per-token log-probs `lp` (log p_theta of `target_tokens`, computed by the
model being trained, carrying the gradient) and its `loss_fn_inputs` to a per-token loss; the
datum's loss is the sum over its tokens and the request's loss (`loss:sum`) the sum over its datums,
as Tinker defines them. A loss is one entry of `LOSSES`: its function, the inputs it requires and
may take, and its `loss_fn_config` keys with their defaults.

The policy-gradient ratios come from turnrl's own loss code (`algorithms.policy_losses`):
`token_log_ratio` (log r_t = lp_t - q_t, clamped to +-20 as every turnrl loss clamps it: exp(20) is
already far outside any clip range), `ppo_clip` and `cispo` compute PPO's and CISPO's per-token
terms with exactly these formulas, so they are called rather than written again.

`weights` (optional for the policy-gradient losses, as Tinker's RL examples send it) multiplies
each token's loss; with 0/1 weights it is the mask of the tokens that count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from turnrl.algorithms import policy_losses as pl

LossFn = Callable[[Tensor, dict[str, Tensor], dict[str, float]], Tensor]


def cross_entropy(lp: Tensor, x: dict[str, Tensor], cfg: dict[str, float]) -> Tensor:
    """loss_t = -w_t * lp_t (negative log-likelihood of each target token, weighted).

    `target_tokens` may be (N,) or (N, K) (K candidate tokens per position, with weights of the same
    shape: top-K distillation); `weights` defaults to 1 on every token."""
    return -x["weights"] * lp


def _ratio(lp: Tensor, sampling_lp: Tensor) -> Tensor:
    everywhere = torch.ones_like(lp, dtype=torch.bool)
    return torch.exp(pl.token_log_ratio(sampling_lp, lp, everywhere))


def importance_sampling(lp: Tensor, x: dict[str, Tensor], cfg: dict[str, float]) -> Tensor:
    """loss_t = -w_t * r_t * A_t with r_t = exp(lp_t - q_t): REINFORCE corrected by the importance
    ratio of the policy being trained to the sampler (q_t: `logprobs`, the sampler's log-prob of the
    token; A_t: `advantages`)."""
    return -x["weights"] * _ratio(lp, x["logprobs"]) * x["advantages"]


def ppo(lp: Tensor, x: dict[str, Tensor], cfg: dict[str, float]) -> Tensor:
    """loss_t = -w_t * min(r_t A_t, clip(r_t, lo, hi) A_t), r_t = exp(lp_t - q_t): PPO's clipped
    surrogate, token-wise, without a dual clip. lo, hi: `clip_low_threshold` (0.8) and
    `clip_high_threshold` (1.2), Tinker's absolute bounds of the ratio (1 - eps, 1 + eps)."""
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    terms = pl.ppo_clip(x["advantages"], _ratio(lp, x["logprobs"]), 1.0 - lo, hi - 1.0, None)
    return x["weights"] * terms.loss_mat


def cispo(lp: Tensor, x: dict[str, Tensor], cfg: dict[str, float]) -> Tensor:
    """loss_t = -w_t * sg(clip(r_t, lo, hi)) * A_t * lp_t: the clipped ratio is a detached weight on
    the log-likelihood, so every token keeps a gradient. lo, hi: `clip_low_threshold` (0.0: no lower
    bound) and `clip_high_threshold` (4.0), Tinker's defaults."""
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    everywhere = torch.ones_like(lp, dtype=torch.bool)
    inputs = pl.LossInputs(
        old_log_prob=x["logprobs"],
        log_prob=lp,
        advantages=x["advantages"],
        mask=everywhere,
        clip=pl.Clip(low=1.0 - lo, high=hi - 1.0, dual_c=None),
    )
    return x["weights"] * pl.cispo(inputs, pl.NoParams()).loss_mat


@dataclass(frozen=True)
class LossSpec:
    fn: LossFn
    required: tuple[str, ...]
    """The `loss_fn_inputs` every datum must carry (`target_tokens` always among them)."""
    optional: tuple[str, ...] = ("weights",)
    """Inputs it may take: `weights` defaults to 1 on every token."""
    config: dict[str, float] = field(default_factory=dict)
    """`loss_fn_config` keys and their defaults."""
    top_k: bool = False
    """Whether (N, K) targets are accepted (several candidate tokens per position)."""


RL_INPUTS = ("target_tokens", "logprobs", "advantages")
CLIPS = ("clip_low_threshold", "clip_high_threshold")

LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, ("target_tokens",), top_k=True),
    "importance_sampling": LossSpec(importance_sampling, RL_INPUTS),
    "ppo": LossSpec(ppo, RL_INPUTS, config=dict(zip(CLIPS, (0.8, 1.2), strict=True))),
    "cispo": LossSpec(cispo, RL_INPUTS, config=dict(zip(CLIPS, (0.0, 4.0), strict=True))),
}
"""The losses this server computes, by the name the SDK sends (a new one: a function and a line)."""
