"""Policy losses and advantage estimators as tables: a new one is one function and one table line; a
user's own is a file named in the config, checked at start; its errors are one line naming the key."""

import math

import pytest
import torch

from turnrl.algorithms import policy_losses as pl
from turnrl.algorithms.losses import Aggregation, policy_loss, resolve_policy_loss
from turnrl.config import load_config
from turnrl.config.checks import ConfigError
from turnrl.config.schema import ActorConfig

# two responses of 2 tokens, the second token of the second one padding
OLD = torch.tensor([[-1.0, -2.0], [-1.5, -0.5]])
ADV = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
MASK = torch.tensor([[1, 1], [1, 0]])

REINFORCE = """import torch
def loss(x):
    # plain REINFORCE: -A log pi per token (no ratio, no clip)
    return -x.advantages * torch.where(x.mask, x.log_prob, torch.zeros_like(x.log_prob))
"""


def inputs(log_prob: torch.Tensor) -> pl.LossInputs:
    return pl.LossInputs(OLD, log_prob, ADV, MASK)


def test_a_users_loss_by_import_path_is_the_function_it_names(tmp_path):
    (tmp_path / "my_loss.py").write_text(REINFORCE)
    loss = resolve_policy_loss(f"{tmp_path / 'my_loss.py'}:loss")
    log_prob = OLD.clone().requires_grad_(True)
    value, metrics = policy_loss(inputs(log_prob), loss)
    # token-mean over the 3 valid tokens of -A log pi: -(1*-1 + 1*-2 + -2*-1.5) / 3 = -(-1 - 2 + 3) / 3 = 0
    assert value.item() == pytest.approx(0.0)
    value.backward()
    # d/d log pi = -A / 3 on valid tokens, 0 on the padding
    assert torch.allclose(log_prob.grad, torch.tensor([[-1 / 3, -1 / 3], [2 / 3, 0.0]]))
    assert metrics["ppo_kl"].item() == 0.0 and metrics["pg_clipfrac"].item() == 0.0


def test_a_new_table_entry_is_one_function_and_one_line(monkeypatch):
    """A toy loss: -A r without any clip, with a scale parameter read from an `actor.` key."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Scale:
        factor: float = 1.0

    def unclipped(x: pl.LossInputs, p: Scale) -> pl.TokenTerms:
        ratio = torch.exp(pl.token_log_ratio(x.old_log_prob, x.log_prob, x.mask))
        flags = torch.zeros_like(x.mask)
        return pl.TokenTerms(-p.factor * x.advantages * ratio, ratio.detach(), flags, flags, {})

    monkeypatch.setitem(
        pl.POLICY_LOSSES, "unclipped", pl.LossSpec(unclipped, Scale, (("factor", "kl_cov_coef"),))
    )
    actor = ActorConfig(kl_cov_coef=2.0)  # an existing float key stands in for the new entry's own
    loss = resolve_policy_loss("unclipped", actor)
    assert loss.params == Scale(2.0)
    # on-policy r = 1: -2 * A per valid token, token-mean: -2 * (1 + 1 - 2) / 3 = 0; seq-mean-token-mean:
    # sequence 1: -2 * (1 + 1) / 2 = -2, sequence 2: -2 * -2 = 4, mean 1
    value, _ = policy_loss(inputs(OLD.clone()), loss, Aggregation("seq-mean-token-mean"))
    assert value.item() == pytest.approx(1.0)


def test_every_entry_reads_its_parameters_from_the_actors_keys():
    actor = ActorConfig(sapo_tau_pos=0.5, clip_cov_ratio=0.25, clip_cov_lb=-1.0, kl_cov_coef=0.0)
    assert resolve_policy_loss("sapo", actor).params == pl.SapoParams(0.5, 1.05)
    assert resolve_policy_loss("clip_cov", actor).params == pl.ClipCovParams(0.25, -1.0, 5.0)
    assert resolve_policy_loss("kl_cov", actor).params == pl.KlCovParams(2e-3, 0.0)
    for name, spec in pl.POLICY_LOSSES.items():  # every key a parameter names exists on the actor
        for _, key in spec.keys:
            assert hasattr(actor, key), (name, key)


def test_a_users_loss_returning_the_wrong_shape_is_one_line(tmp_path):
    (tmp_path / "bad.py").write_text("def loss(x):\n    return x.log_prob.sum()\n")
    loss = resolve_policy_loss(f"{tmp_path / 'bad.py'}:loss")
    with pytest.raises(
        ValueError, match=r"must return a \(B, T\) per-token loss shaped like the mask \(2, 2\)"
    ):
        policy_loss(inputs(OLD.clone()), loss)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("{tmp}/missing.py:loss", "actor.policy_loss_mode: file not found"),
        ("{tmp}/ok.py:other", "defines no 'other'"),
        ("{tmp}/broken.py:loss", "importing"),
        ("no_such_module_xyz:loss", "cannot import module 'no_such_module_xyz'"),
    ],
)
def test_a_users_loss_that_does_not_load_is_one_line_before_any_model(tmp_path, ref, message):
    (tmp_path / "ok.py").write_text(REINFORCE)
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.path=tiny-random", f"actor.policy_loss_mode={ref.format(tmp=tmp_path)}"])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_clip_range_is_checked_per_entry():
    log_prob = OLD.clone()
    with pytest.raises(ValueError, match=r"clip_ratio_low must be in \[0, 1\) for vanilla, got 1.0"):
        policy_loss(pl.LossInputs(OLD, log_prob, ADV, MASK, pl.Clip(low=1.0)), resolve_policy_loss("vanilla"))
    # CISPO may drop the lower bound, GMPO reads it in log space
    for name in ("cispo", "gmpo"):
        value, _ = policy_loss(
            pl.LossInputs(OLD, log_prob, ADV, MASK, pl.Clip(low=1.0)), resolve_policy_loss(name)
        )
        assert math.isfinite(value.item())


# -- advantage estimators ------------------------------------------------------------------------------

MEAN_BASELINE = """import torch
def estimate(x):
    # each response's score minus the batch's mean score, on every model token; returns = advantages
    score = (x.token_level_rewards * x.response_mask).sum(-1)
    return (score - score.mean()).unsqueeze(-1) * x.response_mask
"""


def test_a_users_estimator_by_import_path(tmp_path):
    from turnrl.algorithms.advantages import AdvantageInputs, compute_advantage, resolve_estimator

    (tmp_path / "est.py").write_text(MEAN_BASELINE)
    estimator = resolve_estimator(f"{tmp_path / 'est.py'}:estimate")
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    adv, ret = compute_advantage(estimator, AdvantageInputs(rewards, mask))
    # scores 1, 0, 2 (mean 1): advantages 0, -1, 1 on each response's model tokens, 0 on padding
    assert torch.equal(adv, torch.tensor([[0.0, 0.0], [-1.0, 0.0], [1.0, 1.0]])) and torch.equal(ret, adv)


def test_a_new_estimator_is_one_function_and_one_line(monkeypatch):
    from turnrl.algorithms import advantages as A

    def constant(x, p):
        adv = x.response_mask * p.gamma
        return adv, adv

    monkeypatch.setitem(
        A.ESTIMATORS, "constant", A.EstimatorSpec(constant, A.Discount, (("gamma", "gamma"),))
    )
    from turnrl.config.schema import AlgorithmConfig

    estimator = A.resolve_estimator("constant", AlgorithmConfig(gamma=0.5))
    adv, _ = A.compute_advantage(estimator, A.AdvantageInputs(torch.ones(1, 2), torch.ones(1, 2)))
    assert torch.equal(adv, torch.full((1, 2), 0.5))


def test_an_estimator_reads_its_parameters_and_names_what_it_lacks():
    from turnrl.algorithms.advantages import (
        AdvantageInputs,
        GigpoParams,
        compute_advantage,
        resolve_estimator,
    )
    from turnrl.config.schema import AlgorithmConfig

    alg = AlgorithmConfig()
    alg.gigpo.step_weight, alg.norm_adv_by_std_in_grpo = 0.5, False
    assert resolve_estimator("gigpo", alg).params == GigpoParams(0.5, 0.95, False)
    x = AdvantageInputs(torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(
        ValueError,
        match=r"compute_advantage\('gigpo'\): responses \(token ids\) and index \(uids\) are required",
    ):
        compute_advantage(resolve_estimator("gigpo", alg), x)


def test_a_users_estimator_that_does_not_load_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.path=tiny-random", f"algorithm.adv_estimator={tmp_path}/none.py:estimate"])
    assert "algorithm.adv_estimator: file not found" in str(err.value) and "\n" not in str(err.value)
