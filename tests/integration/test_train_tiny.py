"""End to end on `tiny-random`: real model, real tokenizer, real loop, a learnable reward."""

import pytest

from tests.support.tiny_runs import read_metrics, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer


@pytest.mark.timeout(300)
def test_grpo_raises_a_learnable_reward(tmp_path):
    cfg = load_config(None, tiny_overrides(tmp_path))
    run = Trainer(cfg).fit()
    rows = [r for r in read_metrics(run) if "critic/score/mean" in r]
    scores = [r["critic/score/mean"] for r in rows]
    assert len(scores) == 8
    # the best of the second half against the first two steps: at the tiny runs' lr 1e-2 the policy
    # can overshoot once it has the reward (an Intel Xeon with AMX, one of two pytest workers: 0.59
    # at steps 1-2, 1.0 at step 6, 0.63 over the last two)
    first, best = sum(scores[:2]) / 2, max(scores[4:])
    assert best > first + 0.1, scores
    # the loop wrote what a user looks for
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "latest").is_file()
    for key in (
        "actor/pg_loss",
        "actor/grad_norm",
        "actor/lr",
        "timing_s/gen",
        "perf/throughput",
        "response_length/mean",
    ):
        assert key in rows[-1], key
    # the in-process engine's log-probs serve as the old ones (their agreement with the trainer's
    # own: test_rollout_correction_train)
    assert "timing_s/old_log_prob" not in rows[-1] and "rollout_corr/abs_diff_max" not in rows[-1]


def test_a_loss_and_an_estimator_of_ones_own_train_by_import_path(tmp_path):
    """`actor.policy_loss_mode=file.py:fn` and `algorithm.adv_estimator=file.py:fn`: plain REINFORCE
    (-A log pi) on each score minus the batch's mean, no framework edit; a step moves the policy (the
    gradient is not zero) and reports the loss like any mode."""
    own = tmp_path / "own.py"
    own.write_text(
        "import torch\n"
        "def loss(x):\n"
        "    return -x.advantages * torch.where(x.mask, x.log_prob, torch.zeros_like(x.log_prob))\n"
        "def estimate(x):\n"
        "    score = (x.token_level_rewards * x.response_mask).sum(-1)\n"
        "    return (score - score.mean()).unsqueeze(-1) * x.response_mask\n"
    )
    over = {
        "trainer.total_training_steps": 1,
        "actor.policy_loss_mode": f"{own}:loss",
        "algorithm.adv_estimator": f"{own}:estimate",
    }
    run = Trainer(load_config(None, tiny_overrides(tmp_path, **over))).fit()
    steps = [r for r in read_metrics(run) if "actor/pg_loss" in r]
    assert len(steps) == 1 and steps[0]["actor/grad_norm"] > 0
