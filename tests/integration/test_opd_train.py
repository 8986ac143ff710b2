"""On-policy distillation end to end: tiny-random learns from another tiny model with its tokenizer
(tests/support/teachers.py). A hook keeps each step's `adv` batch, on which the advantages must be
exactly the teacher's log-probs minus the student's on model tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.support.advantages import compute_advantage
from tests.support.teachers import tiny_teacher
from tests.support.tiny_runs import read_metrics, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

KEPT = ("advantages", "returns", "old_log_probs", "teacher_log_prob", "response_mask", "token_level_rewards")


class KeepAdv:
    """A stage hook keeping a copy of every step's batch after the `adv` stage."""

    wants_batches = False

    def __init__(self) -> None:
        self.batches: list[dict] = []

    def record(self, stage, batch, elapsed_s):
        if stage == "adv":
            self.batches.append({k: batch[k].clone() for k in KEPT} | {"uid": batch["uid"].copy()})


def train(tmp_path: Path, steps: int = 2, **extra: object) -> tuple[Path, KeepAdv]:
    teacher = tiny_teacher(tmp_path / "teacher")
    overrides = {"trainer.total_training_steps": steps, "teacher.model.path": teacher, **extra}
    keep = KeepAdv()
    run_dir = Trainer(load_config(None, tiny_overrides(tmp_path, **overrides)), hooks=[keep]).fit()
    return run_dir, keep


@pytest.mark.timeout(300)
# old log-probs: the engine's (slow: ~5 s, the same advantage path), or the trainer's pass
@pytest.mark.parametrize("bypass", [pytest.param("auto", marks=pytest.mark.slow), "false"])
def test_opd_advantages_are_the_teachers_minus_the_students_log_probs(tmp_path: Path, bypass: str):
    run_dir, keep = train(
        tmp_path, **{"algorithm.adv_estimator": "opd", "algorithm.rollout_correction.bypass": bypass}
    )
    rows = [m for m in read_metrics(run_dir) if "distill/reverse_kl/mean" in m]
    assert [m["step"] for m in rows] == [1, 2]
    assert len(keep.batches) == 2
    for m, b in zip(rows, keep.batches, strict=True):
        mask = b["response_mask"]
        gap = (b["old_log_probs"] - b["teacher_log_prob"])[mask == 1]
        assert math.isfinite(m["distill/reverse_kl/mean"]) and gap.numel() > 0
        assert m["distill/reverse_kl/mean"] == pytest.approx(gap.double().mean().item(), abs=1e-6)
        assert m["distill/reverse_kl/max"] == pytest.approx(gap.max().item(), abs=1e-6)
        assert m["timing_s/teacher"] > 0
        # the advantage is -(log p_student - log p_teacher) on model tokens, exactly 0 elsewhere
        expected = torch.where(mask == 1, b["teacher_log_prob"] - b["old_log_probs"], torch.zeros(()))
        assert torch.equal(b["advantages"], expected)
        assert torch.equal(b["returns"], expected)
        assert b["advantages"][mask == 1].abs().sum() > 0  # another model: not a trivial comparison
    # the checkpoint records which teacher the run distilled from
    role = json.loads((run_dir / "checkpoints" / "step_2" / "teacher" / "role.json").read_text())
    assert role == {"role": "teacher", "model": str(tmp_path / "teacher")}


@pytest.mark.timeout(300)
def test_distill_coef_adds_the_term_to_grpo(tmp_path: Path):
    _, keep = train(tmp_path, steps=1, **{"algorithm.distill_coef": 0.5})
    b = keep.batches[0]
    grpo, _ = compute_advantage(
        "grpo", token_level_rewards=b["token_level_rewards"], response_mask=b["response_mask"], index=b["uid"]
    )
    term = torch.where(b["response_mask"] == 1, b["teacher_log_prob"] - b["old_log_probs"], torch.zeros(()))
    assert torch.allclose(b["advantages"], grpo + 0.5 * term, atol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_resume_with_another_teacher_is_refused(tmp_path: Path):
    run_dir, _ = train(tmp_path, steps=1, **{"algorithm.adv_estimator": "opd"})
    other = tiny_teacher(tmp_path / "other", seed=11)
    overrides = {
        "trainer.total_training_steps": 2,
        "teacher.model.path": other,
        "algorithm.adv_estimator": "opd",
    }
    from turnrl.workers.state import CheckpointError

    with pytest.raises(CheckpointError) as err:
        Trainer(load_config(None, tiny_overrides(tmp_path, **overrides)))
    assert str(err.value) == (
        f"{run_dir / 'checkpoints' / 'step_1' / 'teacher'}: the checkpoint's teacher is "
        f"'{tmp_path / 'teacher'}' but teacher.model.path is '{other}'; resuming would change the "
        "distillation target"
    )


@pytest.mark.slow  # the default run keeps test_distributed's PPO test: the reference, whose sharding
# the teacher shares (workers/reference.FrozenScorer), on 2 ranks against 1
@pytest.mark.timeout(600)
def test_the_teacher_on_two_ranks_equals_one(tmp_path: Path):
    """The teacher's group is sharded over 2 Ray ranks (gloo, FSDP2) like the reference: its
    log-probs, hence the metrics and the update, agree with one process to float rounding."""
    pytest.importorskip("ray")
    from tests.support.ranks import GRPO, assert_same

    def run(ranks: int) -> list[dict]:
        extra = {**GRPO, "algorithm.adv_estimator": "opd", "trainer.device": "cpu"}
        extra["trainer.n_gpus_per_node"] = ranks
        run_dir, _ = train(tmp_path / f"r{ranks}", **extra)
        return [m for m in read_metrics(run_dir) if "distill/reverse_kl/mean" in m]

    one, two = run(1), run(2)
    keys = ("distill/reverse_kl/mean", "distill/reverse_kl/max", "actor/pg_loss", "actor/grad_norm")
    assert_same(one, two, keys)
    assert two[0]["balance/teacher/imbalance_after"] <= two[0]["balance/teacher/imbalance_before"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_training_run_directory_is_a_teacher(tmp_path: Path):
    """`teacher.model.path` takes a turnrl run directory, exported once like `model.path`'s."""
    teacher_run, _ = train(tmp_path / "first", steps=1, **{"algorithm.adv_estimator": "opd"})
    run_dir, _ = train(
        tmp_path / "second", steps=1, **{"algorithm.adv_estimator": "opd", "teacher.model.path": teacher_run}
    )
    [row] = [m for m in read_metrics(run_dir) if "distill/reverse_kl/mean" in m]
    assert math.isfinite(row["distill/reverse_kl/mean"])
    role = json.loads((run_dir / "checkpoints" / "step_1" / "teacher" / "role.json").read_text())
    assert (Path(role["model"]) / "config.json").is_file()  # the exported policy of the run's checkpoint
