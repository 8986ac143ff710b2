"""Advantage estimators of the PPO family.

Every estimator takes ``(B, T)`` response tensors and returns ``(advantages, returns)``, both ``(B, T)``
and exactly 0 wherever ``response_mask`` is 0. Observation tokens (mask 0 inside a multi-turn response)
are not time steps of the policy: the recursions below step over them without cutting the trajectory,
and any reward or value sitting on them is ignored.

Outcome estimators (``grpo``, ``rloo``, ``reinforce_plus_plus_baseline``, ``remax``) reduce each
response to one score, the sum of its ``token_level_rewards`` over the whole response (the reward lands on
the last model token), and broadcast one advantage to every model token of that response. They return
``returns == advantages`` except ReMax, whose returns are the raw score; a critic never reads them.

On-policy distillation (``opd``) reads no reward: its per-token advantage is the teacher's log-prob of the
token the student sampled minus the student's own, and ``algorithm.distill_coef`` adds that term to any
other estimator's advantages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from turnrl.algorithms.core import check_same_shape, masked_fill_zero, masked_whiten
from turnrl.algorithms.distill import opd_advantage
from turnrl.algorithms.groups import group_stats
from turnrl.algorithms.turn_credit import gigpo_advantage, turn_rloo_advantage
from turnrl.plugins import load_function


def _check_2d(
    where: str, token_level_rewards: Tensor, response_mask: Tensor, **others: Tensor | None
) -> None:
    if token_level_rewards.dim() != 2:
        raise ValueError(
            f"{where}: token_level_rewards must be (B, T), got shape {tuple(token_level_rewards.shape)}"
        )
    check_same_shape(
        {"token_level_rewards": token_level_rewards, "response_mask": response_mask, **others}, where
    )


def _broadcast(per_seq: Tensor, response_mask: Tensor, like: Tensor) -> Tensor:
    return masked_fill_zero(per_seq.to(like.dtype).unsqueeze(-1).expand_as(like), response_mask)


def _reverse_scan(
    token_level_rewards: Tensor, response_mask: Tensor, gamma: float, values: Tensor | None, lam: float
) -> Tensor:
    """Backward recursion over model tokens only, vectorised over the batch.

    Without ``values`` it is the discounted return-to-go G_t = r_t + gamma * G_next. With ``values`` it is
    GAE (Schulman et al. 2016, eq. 16): delta_t = r_t + gamma * V_next - V_t, A_t = delta_t + gamma*lam*A_next.
    At a masked position the running quantity and V_next pass through unchanged and the output is 0, so an
    observation between two model turns neither ends the episode nor counts as a step.
    """
    mask = response_mask != 0
    rewards = masked_fill_zero(token_level_rewards, mask)
    zeros = rewards.new_zeros(rewards.shape[0])
    running, next_value = zeros, zeros
    out = torch.zeros_like(rewards)
    for t in range(rewards.shape[1] - 1, -1, -1):
        m = mask[:, t]
        if values is None:
            candidate = rewards[:, t] + gamma * running
        else:
            v_t = torch.where(m, values[:, t], zeros)
            candidate = rewards[:, t] + gamma * next_value - v_t + gamma * lam * running
            next_value = torch.where(m, v_t, next_value)
        running = torch.where(m, candidate, running)
        out[:, t] = torch.where(m, candidate, zeros)
    return out


def gae_advantage(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    gamma: float,
    lam: float,
    whiten: bool = True,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over model tokens, for PPO with a critic.

    The value after the last model token is 0 (the response ends the episode). Returns are the
    lambda-returns ``A_t + V_t``, computed before whitening (they are the critic's regression target).
    With ``whiten`` (the default, as in PPO implementations) the advantages are then normalised to mean 0,
    std 1 over all valid tokens of the batch.
    """
    _check_2d("gae_advantage", token_level_rewards, response_mask, values=values)
    with torch.no_grad():
        advantages = _reverse_scan(token_level_rewards, response_mask, gamma, values, lam)
        returns = masked_fill_zero(advantages + values, response_mask)
        if whiten:
            advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


def grpo_outcome_advantage(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[Tensor, Tensor]:
    """GRPO (Shao et al. 2024): (score - group mean) / (group std + epsilon), std unbiased.

    ``norm_adv_by_std=False`` gives Dr. GRPO's (Liu et al. 2025) plain ``score - group mean``. A group
    whose scores are all equal gets advantage exactly 0.
    """
    _check_2d("grpo_outcome_advantage", token_level_rewards, response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        size, total, std, flat = group_stats(scores, index, "grpo_outcome_advantage")
        adv = scores.to(torch.float64) - total / size
        if norm_adv_by_std:
            adv = adv / (std + epsilon)
        adv = torch.where(flat, torch.zeros_like(adv), adv)
        advantages = _broadcast(adv, response_mask, token_level_rewards)
    return advantages, advantages.clone()


def rloo_outcome_advantage(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """RLOO (Ahmadian et al. 2024): score minus the mean score of the *other* samples of the same prompt.

    ``epsilon`` is accepted for a uniform call signature; the leave-one-out baseline needs no division
    guard because group size 1 is rejected.
    """
    del epsilon
    _check_2d("rloo_outcome_advantage", token_level_rewards, response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).to(torch.float64)
        size, total, _, flat = group_stats(scores, index, "rloo_outcome_advantage")
        adv = scores - (total - scores) / (size - 1)
        adv = torch.where(flat, torch.zeros_like(adv), adv)
        advantages = _broadcast(adv, response_mask, token_level_rewards)
    return advantages, advantages.clone()


def reinforce_plus_plus_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, gamma: float
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025): discounted return-to-go over model tokens, whitened over the batch.

    Returns are the un-whitened returns-to-go.
    """
    _check_2d("reinforce_plus_plus_advantage", token_level_rewards, response_mask)
    with torch.no_grad():
        returns = _reverse_scan(token_level_rewards, response_mask, gamma, None, 1.0)
        advantages = masked_whiten(returns, response_mask)
    return advantages, returns


def reinforce_plus_plus_baseline_advantage(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline: score minus group mean, then whitened over all valid tokens of the batch.

    The group mean removes the per-prompt difficulty; the batch-level (not group-level) std keeps the
    scale comparable across prompts. ``epsilon`` is added to the batch variance before the square root.
    """
    _check_2d("reinforce_plus_plus_baseline_advantage", token_level_rewards, response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).to(torch.float64)
        size, total, _, flat = group_stats(scores, index, "reinforce_plus_plus_baseline_advantage")
        centred = torch.where(flat, torch.zeros_like(scores), scores - total / size)
        per_token = _broadcast(centred, response_mask, token_level_rewards)
        advantages = masked_whiten(per_token, response_mask, eps=epsilon)
    return advantages, advantages.clone()


def remax_advantage(
    token_level_rewards: Tensor, reward_baselines: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al. 2023): score minus the reward of the greedy rollout of the same prompt.

    ``reward_baselines`` has shape (B,). Returns are the raw score broadcast to the model tokens.
    """
    _check_2d("remax_advantage", token_level_rewards, response_mask)
    if reward_baselines is None or reward_baselines.shape != token_level_rewards.shape[:1]:
        got = None if reward_baselines is None else tuple(reward_baselines.shape)
        raise ValueError(
            f"remax_advantage: reward_baselines must have shape ({token_level_rewards.shape[0]},), got {got}"
        )
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        advantages = _broadcast(
            scores - reward_baselines.to(scores.dtype), response_mask, token_level_rewards
        )
        returns = _broadcast(scores, response_mask, token_level_rewards)
    return advantages, returns


# -- the table: estimator(x, params) -> (advantages, returns) ----------------------------------------


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read from the batch, each (B, T) over response positions unless said;
    None where the run has no such field (an estimator that needs one names it)."""

    token_level_rewards: Tensor
    """The reward per token (an outcome reward sits on the last model token)."""
    response_mask: Tensor
    """1 on model tokens, 0 on observations and padding."""
    index: np.ndarray | None = None
    """(B,) group ids: the responses of one prompt share one (`uid`)."""
    values: Tensor | None = None
    """The critic's predictions (`gae`)."""
    reward_baselines: Tensor | None = None
    """(B,) greedy rollouts' rewards (`remax`)."""
    old_log_probs: Tensor | None = None
    """The student's log-probs (`opd`, `algorithm.distill_coef`)."""
    teacher_log_prob: Tensor | None = None
    """The teacher's log-probs of the same tokens (`opd`, `algorithm.distill_coef`)."""
    responses: Tensor | None = None
    """The response token ids (`gigpo`: its states are observations)."""
    turn_rewards: np.ndarray | None = None
    """(B,) per row, the step rewards of its model turns (`rollout.multi_turn.step_rewards`; read by
    `gigpo` and `turn_rloo` when present)."""


NEEDS = {
    "index": "index (uids)",
    "values": "values (the critic's predictions)",
    "reward_baselines": "reward_baselines (greedy rollout rewards)",
    "responses": "responses (token ids)",
    "old_log_probs": "old_log_probs (the student's log-probs)",
    "teacher_log_prob": "teacher_log_prob (the teacher's log-probs: set teacher.model.path)",
    "turn_rewards": "turn_rewards (step rewards per turn: set rollout.multi_turn.step_rewards=true)",
}
"""The `AdvantageInputs` fields an estimator may need (`EstimatorSpec.needs`), as errors word them."""


@dataclass(frozen=True)
class NoParams:
    """An estimator with no parameters."""


@dataclass(frozen=True)
class Discount:
    gamma: float = 1.0
    """The discount (`algorithm.gamma`)."""
    lam: float = 1.0
    """GAE's lambda (`algorithm.lam`)."""


@dataclass(frozen=True)
class GroupNorm:
    norm_by_std: bool = True
    """Divide by the group's standard deviation (`algorithm.norm_adv_by_std_in_grpo`; Dr. GRPO: false)."""
    epsilon: float = 1e-6
    """Added to the standard deviation."""


@dataclass(frozen=True)
class Epsilon:
    epsilon: float = 1e-6
    """Added to a standard deviation before dividing by it."""


@dataclass(frozen=True)
class GigpoParams:
    step_weight: float = 1.0
    """Weight of the step-group advantage (`algorithm.gigpo.step_weight`)."""
    gamma: float = 0.95
    """Discount of later turns' rewards in a step's return (`algorithm.gigpo.gamma`)."""
    norm_by_std: bool = True
    """As GRPO's (`algorithm.norm_adv_by_std_in_grpo`)."""
    epsilon: float = 1e-6
    """Added to the standard deviation."""


@dataclass(frozen=True)
class TurnRlooParams:
    step_weight: float = 1.0
    """Weight of the per-turn leave-one-out term (`algorithm.gigpo.step_weight`)."""
    gamma: float = 0.95
    """Discount of later turns' rewards in a turn's return (`algorithm.gigpo.gamma`)."""


def _gae(x: AdvantageInputs, p: Discount) -> tuple[Tensor, Tensor]:
    return gae_advantage(x.token_level_rewards, x.values, x.response_mask, p.gamma, p.lam)  # type: ignore[arg-type]


def _grpo(x: AdvantageInputs, p: GroupNorm) -> tuple[Tensor, Tensor]:
    return grpo_outcome_advantage(
        x.token_level_rewards,
        x.response_mask,
        x.index,
        epsilon=p.epsilon,
        norm_adv_by_std=p.norm_by_std,  # type: ignore[arg-type]
    )


def _rloo(x: AdvantageInputs, p: Epsilon) -> tuple[Tensor, Tensor]:
    return rloo_outcome_advantage(x.token_level_rewards, x.response_mask, x.index, p.epsilon)  # type: ignore[arg-type]


def _reinforce_pp(x: AdvantageInputs, p: Discount) -> tuple[Tensor, Tensor]:
    return reinforce_plus_plus_advantage(x.token_level_rewards, x.response_mask, p.gamma)


def _reinforce_pp_baseline(x: AdvantageInputs, p: Epsilon) -> tuple[Tensor, Tensor]:
    return reinforce_plus_plus_baseline_advantage(x.token_level_rewards, x.response_mask, x.index, p.epsilon)  # type: ignore[arg-type]


def _remax(x: AdvantageInputs, p: NoParams) -> tuple[Tensor, Tensor]:
    return remax_advantage(x.token_level_rewards, x.reward_baselines, x.response_mask)  # type: ignore[arg-type]


def _gigpo(x: AdvantageInputs, p: GigpoParams) -> tuple[Tensor, Tensor]:
    return gigpo_advantage(
        x.token_level_rewards,
        x.response_mask,
        x.responses,
        x.index,
        p.step_weight,
        p.gamma,
        p.norm_by_std,
        1e-6,  # type: ignore[arg-type]
        x.turn_rewards,
    )


def _turn_rloo(x: AdvantageInputs, p: TurnRlooParams) -> tuple[Tensor, Tensor]:
    return turn_rloo_advantage(
        x.token_level_rewards,
        x.response_mask,
        x.index,  # type: ignore[arg-type]
        p.step_weight,
        p.gamma,
        x.turn_rewards,
    )


def _opd(x: AdvantageInputs, p: NoParams) -> tuple[Tensor, Tensor]:
    return opd_advantage(x.old_log_probs, x.teacher_log_prob, x.response_mask)  # type: ignore[arg-type]


@dataclass(frozen=True)
class EstimatorSpec:
    """One advantage estimator: its function, its parameters, where the config keeps them, and the
    batch fields it cannot do without."""

    fn: Callable[[AdvantageInputs, Any], tuple[Tensor, Tensor]]
    params: type = NoParams
    keys: tuple[tuple[str, str], ...] = ()
    """(parameter field, `algorithm.` config key, dotted below it) pairs."""
    needs: tuple[str, ...] = ()
    """`AdvantageInputs` fields that must not be None (`NEEDS` words them). They also say what the run
    must provide: `values` a critic, `reward_baselines` a greedy response per prompt, `index` groups
    of `rollout.n` >= 2, `teacher_log_prob` a teacher (see the properties below)."""
    per_sequence: bool = False
    """One advantage per response (an outcome estimator): an agent episode that forked into several
    rows is then one response of its group, its advantage given to every row (`episode_advantage`)."""
    reads: tuple[str, ...] = ()
    """`AdvantageInputs` fields it reads where the batch has them, without needing them."""
    multi_turn: bool = False
    """It credits the turns of multi-turn episodes: a single-turn run is refused."""

    @property
    def reads_turn_rewards(self) -> bool:
        """It adds the step rewards (`rollout.multi_turn.step_rewards`) to the turns' returns."""
        return "turn_rewards" in (*self.needs, *self.reads)

    @property
    def needs_critic(self) -> bool:
        """It reads the critic's values: the config must enable `critic`."""
        return "values" in self.needs

    @property
    def needs_greedy_baseline(self) -> bool:
        """It reads the reward of a greedy response to each prompt (ReMax): the sampler generates one."""
        return "reward_baselines" in self.needs

    @property
    def needs_groups(self) -> bool:
        """It compares the responses of one prompt: `rollout.n` must be >= 2."""
        return "index" in self.needs

    @property
    def distills(self) -> bool:
        """Its advantage is the teacher's term itself (on-policy distillation): it needs a teacher, and
        `algorithm.distill_coef` (that term added to another estimator) does not apply."""
        return "teacher_log_prob" in self.needs


GROUP_KEYS = (("norm_by_std", "norm_adv_by_std_in_grpo"),)
ESTIMATORS: dict[str, EstimatorSpec] = {
    "gae": EstimatorSpec(_gae, Discount, (("gamma", "gamma"), ("lam", "lam")), ("values",)),
    "grpo": EstimatorSpec(_grpo, GroupNorm, GROUP_KEYS, ("index",), per_sequence=True),
    "rloo": EstimatorSpec(_rloo, Epsilon, needs=("index",), per_sequence=True),
    "reinforce_plus_plus": EstimatorSpec(_reinforce_pp, Discount, (("gamma", "gamma"),)),
    "reinforce_plus_plus_baseline": EstimatorSpec(
        _reinforce_pp_baseline, Epsilon, needs=("index",), per_sequence=True
    ),
    "remax": EstimatorSpec(_remax, needs=("reward_baselines",), per_sequence=True),
    "gigpo": EstimatorSpec(
        _gigpo,
        GigpoParams,
        (("step_weight", "gigpo.step_weight"), ("gamma", "gigpo.gamma"), *GROUP_KEYS),
        ("responses", "index"),
        reads=("turn_rewards",),
    ),
    "turn_rloo": EstimatorSpec(
        _turn_rloo,
        TurnRlooParams,
        (("step_weight", "gigpo.step_weight"), ("gamma", "gigpo.gamma")),
        ("index",),
        reads=("turn_rewards",),
        multi_turn=True,
    ),
    "opd": EstimatorSpec(_opd, needs=("old_log_probs", "teacher_log_prob")),
}
"""`algorithm.adv_estimator` -> its estimator."""
ADV_ESTIMATORS: tuple[str, ...] = tuple(ESTIMATORS)
ESTIMATOR_KEY = "algorithm.adv_estimator"


@dataclass(frozen=True)
class Estimator:
    """An estimator resolved from the config: its table entry (or a user's) and its parameters."""

    name: str
    spec: EstimatorSpec
    params: Any


def _config_value(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def resolve_estimator(name: str, config: Any = None, where: str = ESTIMATOR_KEY) -> Estimator:
    """The estimator `name` names: a table entry, its parameters read from `config` (the algorithm
    config; None: the dataclass defaults), or a user's function `path/to/file.py:fn` /
    `package.module:fn` taking one `AdvantageInputs` and returning `(advantages, returns)` or the
    advantages alone (then the returns too). A user's function may declare its table row's `needs`
    and `per_sequence` as attributes (`fn.needs = ("reward_baselines",)`: ReMax's greedy baseline)."""
    spec = ESTIMATORS.get(name)
    if spec is not None:
        fields = {f: _config_value(config, key) for f, key in spec.keys} if config is not None else {}
        return Estimator(name, spec, spec.params(**fields))
    if ":" not in name:
        raise ValueError(
            f"unknown advantage estimator {name!r}; valid estimators: {', '.join(ADV_ESTIMATORS)}"
        )
    return Estimator(name, _user_spec(load_function(name, where), name, where), NoParams())


def _user_spec(fn: Any, name: str, where: str) -> EstimatorSpec:
    """A user's estimator as a table row: what it declares on the function, checked here so that a
    misspelt field is one line naming `where` before any model loads."""
    needs = getattr(fn, "needs", ())
    needs = (needs,) if isinstance(needs, str) else tuple(needs)
    unknown = [f for f in needs if f not in NEEDS]
    if unknown:
        raise ValueError(
            f"{where}: {name} needs {', '.join(map(repr, unknown))}, not an input an estimator may "
            f"need; valid: {', '.join(NEEDS)}"
        )
    per_sequence = bool(getattr(fn, "per_sequence", False))
    return EstimatorSpec(partial(_user_estimator, fn, name), needs=needs, per_sequence=per_sequence)


def _user_estimator(fn: Any, name: str, x: AdvantageInputs, p: Any) -> tuple[Tensor, Tensor]:
    out = fn(x)
    advantages, returns = out if isinstance(out, tuple) else (out, out)
    for what, t in (("advantages", advantages), ("returns", returns)):
        if not isinstance(t, Tensor) or t.shape != x.response_mask.shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(
                f"{ESTIMATOR_KEY}={name}: {what} must be shaped like the response mask "
                f"{tuple(x.response_mask.shape)}, got {got}"
            )
    mask = x.response_mask != 0
    return masked_fill_zero(advantages, mask), masked_fill_zero(returns, mask)


def compute_advantage(
    estimator: Estimator, x: AdvantageInputs, distill_coef: float = 0.0
) -> tuple[Tensor, Tensor]:
    """The advantages and returns of `estimator` (see each function for the maths).

    ``gae``, ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline`` whiten their advantages over the
    valid tokens of the whole batch; ``grpo``, ``rloo``, ``remax`` and ``opd`` do not (GRPO normalises per
    group). ``opd`` reads ``old_log_probs`` (the student's) and ``teacher_log_prob``, not the rewards. With
    another estimator, ``distill_coef`` > 0 then adds ``distill_coef`` times opd's advantage to its
    advantages (after its own whitening); its returns, a critic's targets, stay the task's.
    ``gigpo`` reads ``responses`` (the token ids: its states are observations); ``gigpo`` and
    ``turn_rloo`` read ``turn_rewards`` when present (algorithms/turn_credit.py).
    """
    name, own = estimator.name, estimator.spec.distills
    if (own or distill_coef > 0) and (x.old_log_probs is None or x.teacher_log_prob is None):
        what = f"compute_advantage({name!r})" if own else f"distill_coef={distill_coef}"
        raise ValueError(
            f"{what}: on-policy distillation needs old_log_probs (the student's) and teacher_log_prob "
            "(the teacher's log-probs: set teacher.model.path)"
        )
    missing = [NEEDS[f] for f in estimator.spec.needs if getattr(x, f) is None]
    if missing:
        raise ValueError(f"compute_advantage({name!r}): {' and '.join(missing)} are required")
    advantages, returns = estimator.spec.fn(x, estimator.params)
    if distill_coef > 0 and not own:
        term, _ = opd_advantage(x.old_log_probs, x.teacher_log_prob, x.response_mask)  # type: ignore[arg-type]
        advantages = advantages + distill_coef * term.to(advantages.dtype)
    return advantages, returns


def episode_advantage(
    estimator: Estimator, x: AdvantageInputs, last: np.ndarray, distill_coef: float = 0.0
) -> tuple[Tensor, Tensor]:
    """`compute_advantage`, counting episodes rather than rows. `last[i]` is True on an episode's last
    row; an agent episode that forked at template drift has several adjacent rows, each with the
    episode's reward. A per-sequence estimator then sees each episode once (its last row: a group of
    n episodes stays a group of n, however many forks) and every row of the episode gets the
    episode's advantage on its own model tokens. A per-token estimator (GAE, opd, a discount, a
    teacher term) takes every row as its own sequence.

    Worked example (GRPO, one group): episode A forked into rows 0-1, reward 1; episode B, row 2,
    reward 0. Per episode: mean 0.5, std (unbiased) 0.7071, so A's rows get +0.7071 and B's -0.7071.
    Rows taken alone would give mean 0.667, std 0.577: A +0.577 twice and B -1.155."""
    last = np.asarray(last, dtype=bool)
    if not estimator.spec.per_sequence or distill_coef > 0 or last.all():
        return compute_advantage(estimator, x, distill_coef)
    lead = np.flatnonzero(last)
    rows = torch.as_tensor(lead, dtype=torch.long)
    sub = AdvantageInputs(
        **{
            name: None if value is None else value[lead] if isinstance(value, np.ndarray) else value[rows]
            for name, value in vars(x).items()
        }
    )
    adv, ret = compute_advantage(estimator, sub, distill_coef)
    owner = torch.as_tensor(np.searchsorted(lead, np.arange(len(last)), side="left"), dtype=torch.long)
    mask = sub.response_mask.to(adv.dtype)
    counts = mask.sum(-1).clamp(min=1)
    per_adv, per_ret = (adv * mask).sum(-1) / counts, (ret * mask).sum(-1) / counts
    like = x.token_level_rewards
    return _broadcast(per_adv[owner], x.response_mask, like), _broadcast(
        per_ret[owner], x.response_mask, like
    )
