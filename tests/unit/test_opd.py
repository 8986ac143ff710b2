"""On-policy distillation: the per-token reverse-KL advantage, `algorithm.distill_coef` on top of
GRPO, the `distill/*` metrics (all by hand), the config rules, the tokenizer rule and the teacher's
checkpoint record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.advantages import compute_advantage
from tests.support.cli import one_line_error
from tests.support.teachers import tiny_teacher, tokenizer_dir
from turnrl.algorithms.distill import distill_metrics, opd_advantage
from turnrl.config import ConfigError, load_config
from turnrl.models.loader import load_tokenizer, tokenizer_difference

# Two responses of T = 5. Row 0 is a multi-turn episode: model tokens, two observation tokens
# (mask 0) in the middle, a model token, then padding. Row 1: three model tokens, two pads.
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
STUDENT = torch.tensor([[-1.0, -0.5, -3.0, -4.0, -2.0], [-0.25, -1.5, -0.75, 0.0, 0.0]])
TEACHER = torch.tensor([[-2.0, -0.25, -9.0, -9.0, -1.0], [-0.25, -3.5, -0.5, -7.0, -7.0]])
# A_t = -(log p_s - log p_t) = log p_t - log p_s on model tokens:
#   row 0: -2 - (-1) = -1;  -0.25 - (-0.5) = 0.25;  obs, obs -> 0, 0;  -1 - (-2) = 1
#   row 1: -0.25 - (-0.25) = 0;  -3.5 - (-1.5) = -2;  -0.5 - (-0.75) = 0.25;  pad, pad -> 0, 0
OPD = torch.tensor([[-1.0, 0.25, 0.0, 0.0, 1.0], [0.0, -2.0, 0.25, 0.0, 0.0]])


def test_opd_advantage_by_hand_zero_on_observations_and_padding():
    adv, ret = opd_advantage(STUDENT, TEACHER, MASK)
    assert torch.equal(adv, OPD)
    assert torch.equal(ret, OPD)
    # exactly 0 off the mask, though the log-probs there are far apart (-3 vs -9, 0 vs -7)
    assert adv[MASK == 0].abs().sum().item() == 0.0
    assert adv.dtype == torch.float32


def test_opd_advantage_is_detached_and_not_whitened():
    student = STUDENT.clone().requires_grad_(True)
    adv, _ = opd_advantage(student, TEACHER, MASK)
    assert not adv.requires_grad
    assert adv[MASK == 1].mean().item() != pytest.approx(0.0)  # mean (-1 + .25 + 1 + 0 - 2 + .25)/6 = -0.25


def test_compute_advantage_routes_opd_and_ignores_the_rewards():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 5.0], [0.0, 0.0, -3.0, 0.0, 0.0]])
    adv, ret = compute_advantage(
        "opd",
        token_level_rewards=rewards,
        response_mask=MASK,
        index=np.array([0, 0]),
        old_log_probs=STUDENT,
        teacher_log_prob=TEACHER,
    )
    assert torch.equal(adv, OPD) and torch.equal(ret, OPD)


def test_opd_without_the_teachers_log_probs_is_a_clear_error():
    with pytest.raises(
        ValueError, match=r"compute_advantage\('opd'\).*teacher_log_prob.*teacher\.model\.path"
    ):
        compute_advantage("opd", token_level_rewards=MASK, response_mask=MASK, old_log_probs=STUDENT)
    with pytest.raises(ValueError, match=r"distill_coef=0.5.*teacher_log_prob"):
        compute_advantage(
            "grpo", token_level_rewards=MASK, response_mask=MASK, index=np.array([0, 0]), distill_coef=0.5
        )
    with pytest.raises(ValueError, match="teacher_log_prob has shape"):
        opd_advantage(STUDENT, TEACHER[:, :3], MASK)


def test_distill_coef_adds_c_times_the_term_to_grpo_advantages():
    # two groups of two: scores 1, 0 (group a) and 0.5, 0.5 (group b, all equal: advantage 0)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.5]])
    student = torch.tensor([[-1.0, -2.0, -5.0], [-0.5, -5.0, -5.0], [-1.0, -1.0, -1.0], [-2.0, -8.0, -0.5]])
    teacher = torch.tensor([[-1.5, -1.0, -9.0], [-0.5, -9.0, -9.0], [-2.0, -0.5, -1.0], [-1.0, -1.0, -1.5]])
    index = np.array(["a", "a", "b", "b"], dtype=object)
    # GRPO, group a: mean 0.5, unbiased std sqrt(((1-.5)^2 + (0-.5)^2) / 1) = sqrt(0.5) = 0.70711
    #   row 0: (1 - .5) / (0.70711 + 1e-6) = 0.707106, row 1: -0.707106; group b: 0, 0
    g = 0.5 / (0.5**0.5 + 1e-6)
    # term = teacher - student on mask 1:
    #   row 0: -0.5, 1, (0)   row 1: 0, (0), (0)   row 2: -1, 0.5, 0   row 3: 1, (0), -1
    # c = 0.5 adds half of it:
    expected = torch.tensor(
        [
            [g - 0.25, g + 0.5, 0.0],
            [-g + 0.0, 0.0, 0.0],
            [0.0 - 0.5, 0.0 + 0.25, 0.0],
            [0.0 + 0.5, 0.0, 0.0 - 0.5],
        ]
    )
    args = dict(token_level_rewards=rewards, response_mask=mask, index=index)
    plain, plain_ret = compute_advantage("grpo", **args)
    adv, ret = compute_advantage(
        "grpo", **args, old_log_probs=student, teacher_log_prob=teacher, distill_coef=0.5
    )
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(adv - plain, 0.5 * opd_advantage(student, teacher, mask)[0])
    assert torch.equal(ret, plain_ret)  # returns stay the task's
    # c = 0: the log-probs are not read
    same, _ = compute_advantage("grpo", **args, old_log_probs=student, teacher_log_prob=teacher)
    assert torch.equal(same, plain)


def test_distill_metrics_by_hand():
    # log p_s - log p_t on model tokens:
    #   row 0: -1 - (-2) = 1;  -0.5 - (-0.25) = -0.25;  -2 - (-1) = -1
    #   row 1: 0;  -1.5 - (-3.5) = 2;  -0.75 - (-0.5) = -0.25
    # mean = (1 - 0.25 - 1 + 0 + 2 - 0.25) / 6 = 1.5 / 6 = 0.25; max = 2 (the observation tokens'
    # gaps of 6 and 5, and the pads' 7, are not counted)
    m = distill_metrics(STUDENT, TEACHER, MASK)
    assert m == {"distill/reverse_kl/mean": pytest.approx(0.25), "distill/reverse_kl/max": 2.0}
    assert distill_metrics(STUDENT, TEACHER, torch.zeros_like(MASK)) == {
        "distill/reverse_kl/mean": 0.0,
        "distill/reverse_kl/max": 0.0,
    }


# -- config ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["algorithm.adv_estimator=opd"],
            "'algorithm.adv_estimator=opd' distills from a teacher: set teacher.model.path "
            "(a model with the policy's tokenizer)",
        ),
        (
            ["algorithm.distill_coef=0.1"],
            "'algorithm.distill_coef=0.1' distills from a teacher: set teacher.model.path "
            "(a model with the policy's tokenizer)",
        ),
        (
            ["teacher.model.path=tiny-random"],
            "'teacher.model.path'=tiny-random is set but nothing uses the teacher: set "
            "algorithm.adv_estimator=opd or algorithm.distill_coef > 0, or leave teacher.model.path empty",
        ),
        (
            ["algorithm.adv_estimator=opd", "algorithm.distill_coef=0.5", "teacher.model.path=tiny-random"],
            "'algorithm.distill_coef'=0.5 adds the distillation term to another estimator's advantages; "
            "with algorithm.adv_estimator=opd it is the advantage already: set distill_coef=0",
        ),
        (["algorithm.distill_coef=-0.1"], "'algorithm.distill_coef' must be >= 0 (0 = off), got -0.1"),
        (
            ["teacher.log_prob_micro_batch_size=0"],
            "'teacher.log_prob_micro_batch_size' must be >= 1, got 0",
        ),
        (
            [
                "algorithm.adv_estimator=opd",
                "teacher.model.path=tiny-random",
                "teacher.log_prob_use_dynamic_bsz=true",
                "teacher.log_prob_max_token_len_per_gpu=100",
            ],
            "'teacher.log_prob_max_token_len_per_gpu'=100 cannot hold one sequence of data.max_prompt_length + "
            "data.max_response_length = 280 tokens; raise it to at least 280",
        ),
    ],
)
def test_config_errors_are_one_line(overrides, line):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert str(err.value) == line


def test_opd_and_distill_coef_with_a_teacher_pass():
    cfg = load_config(None, ["algorithm.adv_estimator=opd", "teacher.model.path=tiny-random", "rollout.n=1"])
    assert cfg.teacher.model.path == "tiny-random"
    load_config(None, ["algorithm.distill_coef=0.5", "teacher.model.path=tiny-random"])


# -- tokenizers --------------------------------------------------------------------------------------


def test_tokenizer_difference_names_the_first_differing_token(tmp_path: Path):
    policy = load_tokenizer("tiny-random")
    assert tokenizer_difference(policy, load_tokenizer("tiny-random")) is None
    extra = load_tokenizer(tokenizer_dir(tmp_path / "extra", extra_token="<zz>"))
    assert tokenizer_difference(policy, extra, "the policy", "the teacher") == (
        "token id 49152 is missing in the policy's vocabulary and '<zz>' in the teacher's"
    )
    eos = load_tokenizer(tokenizer_dir(tmp_path / "eos", eos="<|im_start|>"))
    assert tokenizer_difference(policy, eos, "the policy", "the teacher") == (
        "eos_token_id is 2 in the policy's tokenizer and 1 in the teacher's"
    )


@pytest.mark.timeout(200)
def test_a_teacher_with_another_tokenizer_stops_train_at_start_up(tmp_path: Path, cli):
    teacher = tokenizer_dir(tmp_path / "teacher", extra_token="<zz>")
    run = tmp_path / "run"
    line = one_line_error(
        cli(
            "train",
            "model.path=tiny-random",
            "algorithm.adv_estimator=opd",
            f"teacher.model.path={teacher}",
            f"trainer.default_local_dir={run}",
        )
    )
    assert line == (
        f"turnrl train: teacher.model.path '{teacher}' does not share the tokenizer of model.path "
        "'tiny-random': token id 49152 is missing in the policy's vocabulary and '<zz>' in the teacher's; "
        "the teacher scores the policy's token ids, so both models need one tokenizer"
    )
    assert not run.exists()


# -- the teacher role ------------------------------------------------------------------------------


def test_the_teacher_scores_like_the_reference_and_refuses_another_teacher_on_resume(tmp_path: Path):
    from turnrl.batch import Batch
    from turnrl.config.schema import ModelConfig, RefConfig, RolloutConfig, TeacherConfig
    from turnrl.workers.reference import Reference
    from turnrl.workers.state import CheckpointError
    from turnrl.workers.teacher import Teacher

    other = tiny_teacher(tmp_path / "other")
    rollout = RolloutConfig(temperature=0.7)
    teacher = Teacher(TeacherConfig(log_prob_micro_batch_size=3), ModelConfig(path=other), rollout, seed=0)
    ref = Reference(RefConfig(), ModelConfig(path=other), rollout, seed=0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (4, 9), generator=g)
    batch = Batch(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(9).expand(4, 9).clone(),
            "responses": ids[:, -4:],
            "response_mask": torch.ones(4, 4),
        }
    )
    out = teacher.compute_teacher_log_prob(batch)
    assert set(out.keys()) == {"teacher_log_prob"} and out["teacher_log_prob"].shape == (4, 4)
    # one code path: the same model at the same temperature gives the reference's numbers
    assert torch.allclose(out["teacher_log_prob"], ref.compute_ref_log_prob(batch)["ref_log_prob"], atol=1e-6)

    teacher.save(tmp_path / "ckpt")
    teacher.load(tmp_path / "ckpt")  # the same teacher: fine
    moved = Teacher(TeacherConfig(), ModelConfig(path="tiny-random"), rollout, seed=0)
    with pytest.raises(CheckpointError) as err:
        moved.load(tmp_path / "ckpt")
    assert str(err.value) == (
        f"{tmp_path / 'ckpt'}: the checkpoint's teacher is '{other}' but teacher.model.path is 'tiny-random'; "
        "resuming would change the distillation target"
    )
