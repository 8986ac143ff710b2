"""The tinker SDK's built-in losses (`forward_backward(data, loss_fn=...)`), per token.

Each loss maps one datum's per-token log-probs `lp` (log p_theta of `target_tokens`, computed by the
model being trained, carrying the gradient) and its `loss_fn_inputs` to a per-token loss; the
datum's loss is the sum over its tokens and the request's loss (`loss:sum`) the sum over its datums,
as Tinker defines them. A loss is one entry of `LOSSES`: its function, the inputs it requires and
may take, and its `loss_fn_config` keys with their defaults.

The policy-gradient ratios come from turnrl's own loss code (`algorithms.policy_losses`):
`token_log_ratio` (log r_t = lp_t - q_t, clamped to +-20 as every turnrl loss clamps it: exp(20) is
already far outside any clip range), `ppo_clip`, `cispo` and `gspo` compute PPO's, CISPO's and
GSPO's per-token terms with exactly these formulas, so they are called rather than written again.
DRO is Tinker's documented formula. `stable_reinforce`, which the SDK also names, is defined
nowhere this server could read its formula from, so it is refused.

`weights` (optional for the policy-gradient losses, as Tinker's RL examples send it) multiplies
each token's loss; with 0/1 weights it is the mask of the tokens that count.
"""

from __future__ import annotations

import math
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


def dro(lp: Tensor, x: dict[str, Tensor], cfg: dict[str, float]) -> Tensor:
    """loss_t = -w_t * (lp_t * A_t - beta / 2 * (lp_t - q_t)^2): Direct Reward Optimization
    (Richemond et al. 2024) as Tinker's documentation writes it, a REINFORCE term plus a quadratic
    penalty on the log-ratio to the sampler (no clamp, no clip). `beta` (`loss_fn_config`) is
    required: Tinker documents no default for it."""
    return -x["weights"] * (lp * x["advantages"] - 0.5 * cfg["beta"] * (lp - x["logprobs"]) ** 2)


def gspo(lp: Tensor, x: dict[str, Tensor], cfg: dict[str, float]) -> Tensor:
    """loss_t = -w_t * min(s_t A_t, clip(s_t, lo, hi) A_t): GSPO (Zheng et al. 2025), PPO's clip on
    the datum's sequence ratio s = exp(mean over the tokens with w_t > 0 of (lp_t - q_t)), the
    geometric mean of their token ratios. Per token s_t = sg(s) * exp(lp_t - sg(lp_t)) (GSPO-token,
    the paper's eq. 13): its value is s on every token, its gradient that of lp_t. turnrl's own
    `policy_losses.gspo` computes it. `weights` is required: it says which tokens form the sequence
    (Tinker's datums put 0 log-probs on prompt tokens, which must not enter the mean). lo, hi:
    `clip_low_threshold` (1 - 3e-4) and `clip_high_threshold` (1 + 4e-4), the paper's range."""
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    mask = (x["weights"] > 0)[None]
    # advantages 0 off the mask, as turnrl's losses expect them
    adv = torch.where(mask, x["advantages"][None], torch.zeros_like(lp)[None])
    inputs = pl.LossInputs(
        old_log_prob=x["logprobs"][None],
        log_prob=lp[None],
        advantages=adv,
        mask=mask,
        clip=pl.Clip(low=1.0 - lo, high=hi - 1.0, dual_c=None),
    )
    return x["weights"] * pl.gspo(inputs, pl.NoParams()).loss_mat[0]


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
    config_required: tuple[str, ...] = ()
    """`loss_fn_config` keys without a default: a request must set them."""


RL_INPUTS = ("target_tokens", "logprobs", "advantages")
CLIPS = ("clip_low_threshold", "clip_high_threshold")

LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, ("target_tokens",), top_k=True),
    "importance_sampling": LossSpec(importance_sampling, RL_INPUTS),
    "ppo": LossSpec(ppo, RL_INPUTS, config=dict(zip(CLIPS, (0.8, 1.2), strict=True))),
    "cispo": LossSpec(cispo, RL_INPUTS, config=dict(zip(CLIPS, (0.0, 4.0), strict=True))),
    "dro": LossSpec(dro, RL_INPUTS, config={"beta": math.nan}, config_required=("beta",)),
    "gspo": LossSpec(
        gspo, (*RL_INPUTS, "weights"), (), config=dict(zip(CLIPS, (1 - 3e-4, 1 + 4e-4), strict=True))
    ),
}
"""The losses this server computes, by the name the SDK sends (a new one: a function and a line)."""
