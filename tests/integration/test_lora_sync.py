"""LoRA runs sample from the trainer's policy, adapter applied: after every weight sync the rollout
engine's log-probs of the sampled tokens equal the trainer's (`rollout_corr/abs_diff_max`, the
largest per-token gap between the engine's log-prob and the trainer's forward on the same tokens),
in-process, through a `turnrl serve` child (the adapter merged into the weights it loads), and in
async mode. tiny-random, CPU fp32, 3 steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tiny_runs import tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

LORA = {"model.lora_rank": 8, "trainer.total_training_steps": 3}
TOL = 1e-4  # fp32 kernels of two processes: the gaps measured are 1e-6 to 4e-6


def steps_of(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "mode",
    [
        # the engine samples from the actor's own module; the old log-probs are recomputed to compare
        {"algorithm.rollout_correction.bypass": "false"},
        # the merged weights written, loaded, version-checked
        pytest.param({"rollout.engine": "server"}, marks=pytest.mark.slow),
    ],
    ids=["in_process", "turnrl_serve"],
)
def test_rollout_log_probs_equal_the_trainers_after_every_sync(tmp_path, mode):
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path, **LORA, **mode, **{"actor.optim.lr": 5e-2})))
    steps = steps_of(trainer.fit())
    assert [s["rollout/policy_version/max"] for s in steps] == [0.0, 1.0, 2.0]
    assert all(s["actor/grad_norm"] > 0 for s in steps)  # the adapter moved: the sync has work to do
    for s in steps:
        assert s["rollout_corr/abs_diff_max"] < TOL, (s["step"], s["rollout_corr/abs_diff_max"])


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
@pytest.mark.timeout(300)
def test_async_with_a_learning_rate_of_zero_keeps_them_equal(tmp_path):
    """Async (one step of staleness) through a server: batches sampled at an older version, so only
    an effectively zero learning rate (1e-12: the config refuses 0) makes the two policies equal;
    then every step's gap is rounding, across versions and syncs."""
    extra = {
        "rollout.engine": "server",
        "trainer.mode": "async",
        "trainer.max_staleness": 2,
        "actor.optim.lr": 1e-12,
    }
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path, **LORA, **extra)))
    steps = steps_of(trainer.fit())
    assert len(steps) == 3 and steps[1]["rollout/policy_version/max"] < 2.0  # a stale batch was trained
    for s in steps:
        assert s["rollout_corr/abs_diff_max"] < TOL, (s["step"], s["rollout_corr/abs_diff_max"])
