"""`rollout.engine=server` through the real loop: the trainer starts its own `turnrl serve` child,
samples through it over HTTP, writes each new policy version for it to load, and checks the version
every response reports. Single-turn and agent (multi-turn calculator) runs on `tiny-random`, CPU fp32:
the server's log-probs must be the trainer's to 1e-4 (token in, token out)."""

import json
from pathlib import Path

import pytest

from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

RECIPE = Path(__file__).parents[2] / "examples" / "calculator_agent.yaml"


def steps_of(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r]


@pytest.mark.timeout(300)
def test_single_turn_through_a_child_server(server_run):
    # the session's 3-step run with rollout.engine=server (tests/conftest.py), shared with test_async
    run = server_run.run_dir
    assert server_run.server_stopped  # the run stopped its server
    steps = steps_of(run)
    # version v sampled step v+1 (one actor update per step), and the engine said so
    assert [s["rollout/policy_version/max"] for s in steps] == [0.0, 1.0, 2.0]
    assert all(s["rollout/policy_lag/max"] == 0.0 for s in steps)
    for s in steps:
        assert s["rollout_corr/abs_diff_max"] < 1e-4, s["rollout_corr/abs_diff_max"]
    # only the newest synced version stays on disk (here: v3 after the third update)
    assert sorted(p.name for p in (run / "rollout_weights").iterdir()) == ["v3"]
    assert (run / "rollout_server.log").stat().st_size > 0  # the child logged where the run lives


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
@pytest.mark.timeout(300)
def test_agent_episodes_through_a_child_server(tmp_path):
    overrides = {
        "model.path": "tiny-random",
        "rollout.engine": "server",
        "data.train_batch_size": 2,
        "data.max_response_length": 24,
        "rollout.n": 2,
        "rollout.multi_turn.max_tokens_per_turn": 8,
        "actor.ppo_mini_batch_size": 1,
        "trainer.total_training_steps": 2,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
    }
    trainer = Trainer(load_config(RECIPE, [f"{k}={v}" for k, v in overrides.items()]))
    trainer.val_examples = trainer.val_examples[:4]
    steps = steps_of(trainer.fit())
    assert len(steps) == 2
    for s in steps:
        # several engine calls per episode (one per turn), observations in between: the model
        # tokens' log-probs still match the trainer's, observation tokens do not count
        assert s["agent/turns/mean"] >= 1.0
        assert s["rollout_corr/abs_diff_max"] < 1e-4, s["rollout_corr/abs_diff_max"]
    assert steps[-1]["rollout/policy_version/max"] == 1.0
