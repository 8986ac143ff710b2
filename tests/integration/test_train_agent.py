"""Agent mode through the real loop: multi-turn calculator episodes on `tiny-random`."""

import json
from pathlib import Path

import pytest
import torch

from tests.support.keep_stages import KeepStages
from tests.support.scripted_engine import ScriptedEngine
from tests.support.tiny_runs import reward_file
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
    # where the rollout waited: every step generates; the tools' share is what tool calls took
    assert 0.0 < steps[-1]["agent/wait_engine_s"] <= steps[-1]["timing_s/gen"]
    assert 0.0 <= steps[-1]["agent/wait_tools_s"] <= steps[-1]["timing_s/gen"]
    # response_length counts model tokens only, like agent/model_tokens
    assert steps[-1]["response_length/mean"] == pytest.approx(steps[-1]["agent/model_tokens/mean"])
    assert any((run / "rollouts").glob("step_*.jsonl"))
    assert any(k.startswith("val/test_score/") for k in rows[-1])


@pytest.mark.timeout(300)
def test_gigpo_credits_each_turn_of_real_episodes(tmp_path):
    from turnrl.algorithms.turn_credit import gigpo_advantage, turn_spans

    overrides = {
        "model.path": "tiny-random",
        "data.train_batch_size": 2,
        "data.max_response_length": 64,
        "rollout.n": 4,
        "rollout.multi_turn.max_tokens_per_turn": 16,  # room for a whole scripted call
        "actor.ppo_mini_batch_size": 1,
        "algorithm.adv_estimator": "gigpo",
        "trainer.total_training_steps": 1,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
    }
    overrides["algorithm.rollout_correction.bypass"] = "false"  # scripted turns carry no true log-probs
    overrides["reward.custom_function.path"] = reward_file(tmp_path)  # graded: groups differ
    keep = KeepStages()
    trainer = Trainer(load_config(RECIPE, [f"{k}={v}" for k, v in overrides.items()]), hooks=[keep])
    tok, loop = trainer.tokenizer, trainer.rollout.loop  # type: ignore[attr-defined]

    def first_turn(context: list[int]) -> list[int] | None:
        # every episode opens with a calculator call (a random tiny model rarely writes one); the
        # tiny model samples the turns after the observation
        # (the prompt's worked example holds a call too: the first turn is the one right after it)
        if not tok.decode(context).endswith("assistant\n"):
            return None
        return tok(f"<calculator>{len(context) % 5} + 7</calculator>", add_special_tokens=False)["input_ids"]

    loop.engine = ScriptedEngine(first_turn, inner=loop.engine)
    trainer.fit()
    b = keep.batches["adv"]
    mask = b["response_mask"]
    assert max(len(turn_spans(row)) for row in mask.tolist()) >= 2  # multi-turn episodes were credited
    opened = [tok.decode(b["responses"][i][mask[i].bool()][:4]) for i in range(len(mask))]
    assert all(o.startswith("<calculator>") for o in opened), opened  # the scripted first turns ran
    assert bool((b["advantages"][mask == 0] == 0).all())  # observation tokens and padding: 0
    want, _ = gigpo_advantage(b["token_level_rewards"], mask, b["responses"], b["uid"], 1.0, 0.95)
    assert torch.equal(b["advantages"], want)
    # the step term moved some episode's turns apart: a turn-level credit, not one number per episode
    differs = [
        len({round(float(b["advantages"][i, start]), 6) for start, _ in turn_spans(row)}) > 1
        for i, row in enumerate(mask.tolist())
    ]
    assert any(differs)
