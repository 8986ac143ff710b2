"""What the estimator and policy-loss tables record is what the config checks and the sampler act on:
a critic, a teacher, groups, ReMax's greedy baseline, the clip range and the parameters that must not
cross. No module decides any of it by an estimator's or a loss's name."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from turnrl.algorithms import advantages as A
from turnrl.algorithms import policy_losses as pl
from turnrl.batch import Batch
from turnrl.config import ConfigError, check_config
from turnrl.config.schema import Config
from turnrl.trainer import sampling, stages
from turnrl.trainer.stages import Scored, StageClock

SRC = Path(__file__).resolve().parents[2] / "src" / "turnrl"


def config(estimator: str = "grpo", loss: str = "vanilla", **actor: Any) -> Config:
    cfg = Config()
    cfg.algorithm.adv_estimator, cfg.actor.policy_loss_mode = estimator, loss
    for key, value in actor.items():
        setattr(cfg.actor, key, value)
    return cfg


def error_of(cfg: Config) -> str:
    try:
        check_config(cfg)
    except ConfigError as err:
        return str(err)
    return ""


# -- estimators ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(A.ESTIMATORS))
def test_the_config_demands_what_each_row_declares(name):
    spec = A.ESTIMATORS[name]
    cfg = config(name)
    assert ("needs a critic" in error_of(cfg)) == spec.needs_critic
    cfg.critic.enable = True
    assert ("distills from a teacher" in error_of(cfg)) == spec.distills
    cfg.teacher.model.path = "tiny-random"
    cfg.rollout.n = 1
    assert ("a group of one has no baseline" in error_of(cfg)) == spec.needs_groups
    cfg.rollout.n = 2
    line = error_of(cfg)  # with a teacher: the row that distills uses it, any other leaves it unused
    assert line == "" if spec.distills else "nothing uses the teacher" in line


def test_the_rows_declare_what_their_functions_read():
    assert [n for n, s in A.ESTIMATORS.items() if s.needs_critic] == ["gae"]
    assert [n for n, s in A.ESTIMATORS.items() if s.needs_greedy_baseline] == ["remax"]
    assert [n for n, s in A.ESTIMATORS.items() if s.distills] == ["opd"]
    for name, spec in A.ESTIMATORS.items():
        assert set(spec.needs) <= set(A.NEEDS), name


USER = """import torch
def estimate(x):
    score = (x.token_level_rewards * x.response_mask).sum(-1)
    return (score - {baseline}).unsqueeze(-1) * x.response_mask
estimate.needs = {needs!r}
"""


def user_estimator(tmp_path: Path, needs: Any, baseline: str = "0.0") -> str:
    path = tmp_path / f"est_{abs(hash((repr(needs), baseline)))}.py"
    path.write_text(USER.format(needs=needs, baseline=baseline))
    return f"{path}:estimate"


def test_a_users_estimator_declares_its_needs_and_the_config_checks_them(tmp_path):
    critic = config(user_estimator(tmp_path, ("values",)))
    assert "needs a critic: set critic.enable=true" in error_of(critic)
    teacher = config(user_estimator(tmp_path, ("old_log_probs", "teacher_log_prob")))
    assert "distills from a teacher" in error_of(teacher)
    groups = config(user_estimator(tmp_path, "index"))  # one name alone is taken as a tuple of one
    groups.rollout.n = 1
    assert "a group of one has no baseline" in error_of(groups)
    assert error_of(config(user_estimator(tmp_path, ()))) == ""


def test_a_users_estimator_naming_an_unknown_need_is_one_line(tmp_path):
    line = error_of(config(user_estimator(tmp_path, ("critic",))))
    assert "algorithm.adv_estimator" in line and "'critic'" in line and "valid: index, values" in line
    assert "\n" not in line


def test_a_row_reading_the_teacher_is_the_distillation_itself(monkeypatch):
    """A second row like opd's: its own advantage is the teacher term, distill_coef adds nothing."""
    monkeypatch.setitem(A.ESTIMATORS, "opd_copy", A.ESTIMATORS["opd"])
    student = torch.tensor([[-1.0, -2.0]])
    teacher = torch.tensor([[-0.5, -3.0]])
    x = A.AdvantageInputs(
        torch.zeros(1, 2), torch.ones(1, 2), old_log_probs=student, teacher_log_prob=teacher
    )
    adv, _ = A.compute_advantage(A.resolve_estimator("opd_copy"), x, distill_coef=0.5)
    assert torch.equal(adv, teacher - student)
    with pytest.raises(ValueError, match=r"compute_advantage\('opd_copy'\): on-policy distillation needs"):
        A.compute_advantage(A.resolve_estimator("opd_copy"), dataclasses.replace(x, teacher_log_prob=None))


# -- the sampler: ReMax's greedy baseline by the row, the estimator resolved once ------------------


class FakeGeneration:
    """`stages.generate_and_score`: sampled rows score 0, a greedy row of prompt i scores 10 + i."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []

    def __call__(self, rollout, scorer, prompts: Batch, params, clock) -> Scored:
        self.calls.append((params.n, params.temperature))
        rows = len(prompts) * params.n
        scores = torch.zeros(rows, 3)
        if params.temperature == 0.0:
            scores[:, -1] = 10.0 + torch.arange(rows, dtype=scores.dtype)
        return Scored(Batch({"token_level_scores": scores}), {}, {}, scores.sum(-1).tolist())


def sampler_for(estimator: str, monkeypatch) -> tuple[sampling.StepSampler, FakeGeneration]:
    fake = FakeGeneration()
    monkeypatch.setattr(stages, "generate_and_score", fake)
    cfg = config(estimator)
    cfg.rollout.n = 2
    return sampling.StepSampler(cfg, None, None, None, iter(()), seeded=True), fake  # type: ignore[arg-type]


PROMPTS = Batch(non_tensors={"index": np.arange(2)})


@pytest.mark.parametrize("name", list(A.ESTIMATORS))
def test_a_round_samples_the_greedy_baseline_when_the_row_needs_it(name, monkeypatch):
    sampler, fake = sampler_for(name, monkeypatch)
    scored = sampler.sample_round(PROMPTS, StageClock(), step=1, round_=1)
    wants = A.ESTIMATORS[name].needs_greedy_baseline
    assert fake.calls == [(2, 1.0), (1, 0.0)] if wants else fake.calls == [(2, 1.0)]
    assert ("reward_baselines" in scored.batch) == wants
    if wants:  # each prompt's greedy score on its n rows
        assert scored.batch["reward_baselines"].tolist() == [10.0, 10.0, 11.0, 11.0]


def test_a_users_estimator_that_needs_the_baseline_gets_it_and_is_resolved_once(tmp_path, monkeypatch):
    sampler, fake = sampler_for(
        user_estimator(tmp_path, ("reward_baselines",), "x.reward_baselines"), monkeypatch
    )

    def resolved_again(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the estimator was resolved again")

    monkeypatch.setattr(sampling, "resolve_estimator", resolved_again)
    monkeypatch.setattr(A, "resolve_estimator", resolved_again)
    monkeypatch.setattr(stages, "resolve_estimator", resolved_again)
    for step in (1, 2):
        scored = sampler.sample_round(PROMPTS, StageClock(), step=step, round_=1)
        assert scored.batch["reward_baselines"].tolist() == [10.0, 10.0, 11.0, 11.0]
    assert fake.calls == [(2, 1.0), (1, 0.0)] * 2
    # stage 11 with the sampler's estimator: the user's function, against the greedy baseline
    batch = scored.batch
    batch["response_mask"] = torch.ones(4, 3)
    batch["uid"] = np.array([0, 0, 1, 1])
    stages.advantages(batch, sampler.cfg, sampler.estimator)
    assert batch["advantages"][:, 0].tolist() == [-10.0, -10.0, -11.0, -11.0]


def test_a_users_estimator_without_the_flag_samples_no_baseline(tmp_path, monkeypatch):
    sampler, fake = sampler_for(user_estimator(tmp_path, ()), monkeypatch)
    scored = sampler.sample_round(PROMPTS, StageClock(), step=1, round_=1)
    assert fake.calls == [(2, 1.0)] and "reward_baselines" not in scored.batch


# -- policy losses -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(pl.POLICY_LOSSES))
def test_the_clip_ratio_low_the_config_takes_is_the_rows(name):
    spec = pl.POLICY_LOSSES[name]
    for low in (0.0, 0.5, 0.99, 1.0, 1.5):
        line = error_of(config(loss=name, clip_ratio_low=low))
        assert ("leaves no ratio" not in line) == spec.takes_low(low), (name, low, line)


@pytest.mark.parametrize("name", list(pl.POLICY_LOSSES))
def test_the_parameters_that_must_not_cross_are_the_rows(name):
    spec = pl.POLICY_LOSSES[name]
    keys = dict(spec.keys)
    crossing = {"clip_cov_lb": 6.0, "clip_cov_ub": 5.0}  # the one ordered pair of the table so far
    line = error_of(config(loss=name, **crossing))
    assert ("is above" in line) == any(keys.get(lo) == "clip_cov_lb" for lo, _, _ in spec.ordered), line


def test_the_clip_errors_read_as_before():
    assert error_of(config(loss="vanilla", clip_ratio_low=1.0)) == (
        "'actor.clip_ratio_low'=1.0 leaves no ratio above the lower bound 1 - clip_ratio_low; it must be < 1 "
        "(1 only for cispo: no lower bound; gmpo reads it in log space)"
    )
    assert error_of(config(loss="clip_cov", clip_cov_lb=5.0, clip_cov_ub=1.0)) == (
        "'actor.clip_cov_lb'=5.0 is above 'actor.clip_cov_ub'=1.0: no token could be detached; "
        "lower clip_cov_lb or raise clip_cov_ub"
    )
    assert error_of(config("gae")) == "'algorithm.adv_estimator=gae' needs a critic: set critic.enable=true"


def test_a_users_loss_takes_any_clip_ratio_low_as_its_row_says(tmp_path):
    (tmp_path / "loss.py").write_text("def loss(x):\n    return -x.advantages * x.log_prob\n")
    assert error_of(config(loss=f"{tmp_path / 'loss.py'}:loss", clip_ratio_low=1.5)) == ""


# -- no name is decided outside the tables -------------------------------------------------------------

DECIDERS = ("config/checks.py", "trainer/sampling.py", "trainer/stages.py")


@pytest.mark.parametrize("module", DECIDERS)
def test_no_estimator_or_loss_is_named_outside_its_table(module):
    names = set(A.ESTIMATORS) | set(pl.POLICY_LOSSES)
    tree = ast.parse((SRC / module).read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    literals = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]
    assert not [s for s in literals if s in names], module
