"""Step rewards through the real loop: one training step of the calculator agent on `tiny-random`
with `rollout.multi_turn.step_rewards=true`, credited per turn by gigpo and by turn_rloo."""

import itertools
from pathlib import Path

import pytest
import torch

from tests.support.keep_stages import KeepStages
from tests.support.scripted_engine import ScriptedEngine
from tests.support.tiny_runs import reward_file
from turnrl.algorithms.turn_credit import gigpo_advantage, turn_rloo_advantage, turn_spans
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

RECIPE = Path(__file__).parents[2] / "examples" / "calculator_agent.yaml"
WEIGHT = 0.5


@pytest.mark.timeout(300)
@pytest.mark.parametrize("estimator", ["gigpo", "turn_rloo"])
def test_step_rewards_reach_the_turns_advantages(tmp_path, estimator):
    overrides = {
        "model.path": "tiny-random",
        "data.train_batch_size": 2,
        "data.max_response_length": 96,
        "rollout.n": 4,
        "rollout.multi_turn.max_tokens_per_turn": 16,  # room for a whole scripted call
        "rollout.multi_turn.step_rewards": True,
        "rollout.multi_turn.step_reward_weight": WEIGHT,
        "actor.ppo_mini_batch_size": 1,
        "algorithm.adv_estimator": estimator,
        "trainer.total_training_steps": 1,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
        "algorithm.rollout_correction.bypass": "false",  # scripted turns carry no true log-probs
        "reward.custom_function.path": reward_file(tmp_path),  # graded: groups differ
    }
    keep = KeepStages()
    trainer = Trainer(load_config(RECIPE, [f"{k}={v}" for k, v in overrides.items()]), hooks=[keep])
    tok, loop = trainer.tokenizer, trainer.rollout.loop  # type: ignore[attr-defined]
    calls = itertools.count()

    def first_turn(context: list[int]) -> list[int] | None:
        # every episode opens with a calculator call, alternately well-formed (step reward 1) and not
        # (0), so a group's first turns differ; the tiny model samples the turns after the observation
        if not tok.decode(context).endswith("assistant\n"):  # past the prompt (its generation header)
            return None
        call = "<calculator>3 + 7</calculator>" if next(calls) % 2 == 0 else "<calculator>3 +</calculator>"
        return tok(call, add_special_tokens=False)["input_ids"]

    loop.engine = ScriptedEngine(first_turn, inner=loop.engine)
    trainer.fit()
    b = keep.batches["adv"]
    mask, turn_rewards = b["response_mask"], b["turn_rewards"]
    spans = [turn_spans(row) for row in mask.tolist()]
    assert [len(r) for r in turn_rewards] == [len(s) for s in spans]  # one per model turn
    assert sorted({r[0] for r in turn_rewards}) == [0.0, WEIGHT]  # the first turns' calls, weighted
    assert max(len(s) for s in spans) >= 2
    assert bool((b["advantages"][mask == 0] == 0).all())  # observation tokens and padding: 0
    rewards, uid = b["token_level_rewards"], b["uid"]
    if estimator == "gigpo":
        want, _ = gigpo_advantage(rewards, mask, b["responses"], uid, 1.0, 0.95, turn_rewards=turn_rewards)
        without, _ = gigpo_advantage(rewards, mask, b["responses"], uid, 1.0, 0.95)
    else:
        want, _ = turn_rloo_advantage(rewards, mask, uid, 1.0, 0.95, turn_rewards)
        without, _ = turn_rloo_advantage(rewards, mask, uid, 1.0, 0.95)
    assert torch.equal(b["advantages"], want)
    assert not torch.allclose(b["advantages"], without)  # the step rewards moved the credit
