"""End to end on `tiny-random`: real model, real tokenizer, real loop, a learnable reward."""

import json
from pathlib import Path

import pytest

from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

# a trivially learnable reward: the share of response tokens with an even id. The random
# policy sits at 0.5; a policy gradient moves it up within a few steps.
EVEN_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    ids = extra_info["_ids"](solution_str)
    return sum(1 for i in ids if i % 2 == 0) / max(len(ids), 1)
"""


def reward_file(tmp_path: Path) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "even_reward.py"
    path.write_text(
        "from turnrl.models.loader import load_tokenizer\n"
        "_tok = load_tokenizer('tiny-random')\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    ids = _tok(solution_str, add_special_tokens=False)['input_ids']\n"
        "    return sum(1 for i in ids if i % 2 == 0) / max(len(ids), 1)\n"
    )
    return str(path)


def tiny_overrides(tmp_path: Path, **extra: object) -> list[str]:
    base = {
        "model.path": "tiny-random",
        "data.train_batch_size": 4,
        "data.max_response_length": 8,
        "data.val_batch_size": 100,
        "rollout.n": 8,
        "actor.ppo_mini_batch_size": 2,
        "actor.ppo_micro_batch_size": 32,
        "actor.optim.lr": 1e-2,
        "trainer.total_training_steps": 8,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
        "reward.custom_function.path": reward_file(tmp_path),
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(300)
def test_grpo_raises_a_learnable_reward(tmp_path):
    cfg = load_config(None, tiny_overrides(tmp_path))
    run = Trainer(cfg).fit()
    rows = [r for r in read_metrics(run) if "critic/score/mean" in r]
    scores = [r["critic/score/mean"] for r in rows]
    assert len(scores) == 8
    first, last = sum(scores[:2]) / 2, sum(scores[-2:]) / 2
    assert last > first + 0.1, scores
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
