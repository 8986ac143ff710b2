"""`data.sampler=curriculum` in a real tiny run: it skips the prompts whose groups scored all alike,
its state is in every checkpoint, and a resumed run draws (and logs) exactly what the uninterrupted
run does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tiny_runs import SERVER_RUN, metrics, same_metrics, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

# a third of the prompts always right, a third always wrong (flat groups: no GRPO signal), a third
# scored by the response's characters (varied)
REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    kind = int(ground_truth) % 3
    if kind == 0:
        return 1.0
    if kind == 1:
        return 0.0
    return sum(map(ord, solution_str)) % 7 / 7
"""


def make(root: Path, steps: int, same_length: bool = False, **extra: object) -> Trainer:
    reward = root.parent / "thirds_reward.py"
    reward.write_text(REWARD)
    over = {
        "data.sampler": "curriculum",
        "data.curriculum.window": 1,
        "data.curriculum.revisit_prob": 0.25,
        "data.train_batch_size": 2,
        "rollout.n": 4,
        "actor.ppo_mini_batch_size": 1,
        "reward.custom_function.path": str(reward),
        **extra,
        "trainer.total_training_steps": steps,
    }
    trainer = Trainer(load_config(None, tiny_overrides(root, **over)))
    examples = trainer.loader.examples
    if same_length:  # DAPO concatenates its rounds' batches: they must be padded alike
        examples = [e for e in examples if len(e.prompt_ids) == len(examples[0].prompt_ids)]
    trainer.loader.examples = examples[:8]  # 4 steps an epoch
    trainer.val_examples = trainer.val_examples[:4]
    return trainer


@pytest.mark.timeout(300)
def test_curriculum_skips_flat_prompts_and_resumes_exactly(tmp_path):
    straight = make(tmp_path / "a", 7)
    straight.fit()
    make(tmp_path / "b", 3).fit()
    resumed = make(tmp_path / "b", 7)
    assert resumed.state.global_step == 3 and resumed.loader.state_dict()["history"]
    resumed.fit()

    same_metrics(straight, resumed, range(4, 8))  # data/curriculum/* and training/epoch included
    assert resumed.loader.state_dict() == straight.loader.state_dict()
    rows = [m for m in metrics(straight.run_dir) if "critic/score/mean" in m]
    assert sum(m["data/curriculum/skipped"] for m in rows) > 0  # flat prompts were passed over
    assert all(0 <= m["data/curriculum/flat_groups"] <= 1 for m in rows)
    assert rows[-1]["data/curriculum/pool"] < 8
    saved = json.loads((straight.run_dir / "checkpoints" / "step_7" / "trainer_state.json").read_text())
    assert saved["loader"]["sampler"] == "curriculum" and saved["loader"]["history"]


@pytest.mark.timeout(120)
def test_dapo_rounds_are_observed_before_the_next_is_drawn(tmp_path):
    """With DAPO's dynamic sampling the trained batch holds only varied groups; the curriculum still
    learns from every round's groups (flat ones included) and `data/flat_groups` counts them."""
    trainer = make(tmp_path / "run", 2, same_length=True)
    trainer.cfg.algorithm.filter_groups.enable = True
    trainer.cfg.algorithm.filter_groups.max_num_gen_batches = 3
    trainer.fit()
    rows = [m for m in metrics(trainer.run_dir) if "critic/score/mean" in m]
    assert sum(m["batch/dropped_groups"] for m in rows) > 0
    assert rows[0]["data/flat_groups"] > 0
    history = trainer.loader.state_dict()["history"]
    assert set(history.values()) & {"R", "W"}  # flat groups DAPO dropped were remembered


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_async_mode_draws_and_observes_in_the_producer_thread(tmp_path):
    """The producer runs a step ahead; the loader is touched only there, observing each batch before
    drawing the next, and each step logs its own curriculum numbers."""
    async_run = {
        **SERVER_RUN,
        "trainer.mode": "async",
        "trainer.max_staleness": 2,  # optimizer updates: one step of 2 mini-batches
        "trainer.rollout_dump_freq": 0,
    }
    trainer = make(tmp_path / "run", 6, **async_run)
    trainer.fit()
    rows = [m for m in metrics(trainer.run_dir) if "critic/score/mean" in m]
    assert [m["step"] for m in rows] == list(range(1, 7))
    assert max(m["async/staleness/max"] for m in rows) == 1.0  # it did run ahead
    assert sum(m["data/curriculum/skipped"] for m in rows) > 0
