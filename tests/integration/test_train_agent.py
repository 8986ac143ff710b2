"""Agent mode through the real loop: multi-turn calculator episodes on `tiny-random`."""

import json
from pathlib import Path

import pytest

from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

RECIPE = Path(__file__).parents[2] / "examples" / "calculator_agent.yaml"


@pytest.mark.timeout(300)
def test_calculator_agent_steps_through_the_trainer(tmp_path):
    overrides = {
        "model.path": "tiny-random",
        "data.train_batch_size": 2,
        "data.val_batch_size": 8,
        "data.max_response_length": 24,
        "rollout.n": 2,
        "rollout.multi_turn.max_tokens_per_turn": 8,
        "actor.ppo_mini_batch_size": 1,
        "trainer.total_training_steps": 2,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.rollout_dump_freq": 1,
        "trainer.default_local_dir": str(tmp_path / "run"),
    }
    cfg = load_config(RECIPE, [f"{k}={v}" for k, v in overrides.items()])
    trainer = Trainer(cfg)
    trainer.val_examples = trainer.val_examples[:4]
    run = trainer.fit()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert len(steps) == 2
    for key in (
        "agent/turns/mean",
        "agent/valid_action_ratio",
        "agent/truncated_ratio",
        "agent/model_tokens/mean",
        "agent/obs_tokens/mean",
        "actor/pg_loss",
    ):
        assert key in steps[-1], key
    # response_length counts model tokens only, like agent/model_tokens
    assert steps[-1]["response_length/mean"] == pytest.approx(steps[-1]["agent/model_tokens/mean"])
    assert any((run / "rollouts").glob("step_*.jsonl"))
    assert any(k.startswith("val/test_score/") for k in rows[-1])
