"""DAPO's rounds are joined into one batch although each round's prompts were padded to its own
longest prompt (a real run crashed with 'Sizes of tensors must match' before `concat_rounds`)."""

from pathlib import Path

import numpy as np
import torch

from tests.support.tiny_runs import read_metrics, reward_file, tiny_overrides
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer
from turnrl.trainer.stages import concat_rounds

PAD = 9


def round_of(prompt: list[int], response: list[int]) -> Batch:
    p, r = torch.tensor([prompt]), torch.tensor([response])
    mask = torch.ones(1, len(prompt) + len(response), dtype=torch.long)
    return Batch(
        tensors={
            "prompts": p,
            "responses": r,
            "input_ids": torch.cat([p, r], 1),
            "attention_mask": mask,
            "position_ids": torch.arange(mask.shape[1])[None],
            "response_mask": torch.ones_like(r),
        },
        non_tensors={"uid": np.array([0], dtype=object)},
    )


def test_prompt_side_fields_are_left_padded_to_the_widest_round():
    # round 1: prompt [5, 6], response [7, 8]; round 2: prompt [1, 2, 3], response [4, 4]
    # round 1 gains one pad on the left of its prompt side: ids [9, 5, 6 | 7, 8], mask [0, 1, 1, 1, 1],
    # positions [0, 0, 1, 2, 3] (a pad's position is 0); response-side fields are untouched
    merged = concat_rounds([round_of([5, 6], [7, 8]), round_of([1, 2, 3], [4, 4])], PAD)
    assert merged["prompts"].tolist() == [[PAD, 5, 6], [1, 2, 3]]
    assert merged["input_ids"].tolist() == [[PAD, 5, 6, 7, 8], [1, 2, 3, 4, 4]]
    assert merged["attention_mask"].tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert merged["position_ids"].tolist() == [[0, 0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert merged["responses"].tolist() == [[7, 8], [4, 4]]
    assert merged["response_mask"].tolist() == [[1, 1], [1, 1]]


def test_rounds_of_one_width_are_concatenated_as_they_are():
    a, b = round_of([5, 6], [7, 8]), round_of([1, 2], [4, 4])
    merged = concat_rounds([a, b], PAD)
    assert merged["input_ids"].tolist() == [[5, 6, 7, 8], [1, 2, 4, 4]]


def half_flat_reward(tmp_path: Path) -> Path:
    """A reward file: sums with an even answer score 1 whatever the response (a flat group), the
    others as the tiny runs' reward scores them."""
    even = Path(reward_file(tmp_path))
    flat = tmp_path / "half_flat.py"
    flat.write_text(
        even.read_text().replace("def compute_score", "def even_score")
        + "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        + "    if int(ground_truth) % 2 == 0:\n        return 1.0\n"
        + "    return even_score(data_source, solution_str, ground_truth, extra_info)\n"
    )
    return flat


def test_dynamic_sampling_runs_with_prompts_of_different_lengths(tmp_path):
    # the addition task's prompts differ in length ("3+4" vs "12+45"); 2 prompts a round, so the
    # rounds of a step are padded to different widths. Sums with an even answer score 1 whatever the
    # response (a flat group, dropped), so steps need more rounds
    flat = half_flat_reward(tmp_path)
    overrides = tiny_overrides(
        tmp_path,
        **{
            "data.train_batch_size": 2,
            "rollout.n": 4,
            "trainer.total_training_steps": 4,
            "algorithm.filter_groups.enable": True,
            "algorithm.filter_groups.max_num_gen_batches": 4,
            "reward.custom_function.path": str(flat),
        },
    )
    run = Trainer(load_config(None, overrides)).fit()
    steps = [r for r in read_metrics(run) if "batch/num_gen_batches" in r]
    assert len(steps) == 4
    assert max(r["batch/num_gen_batches"] for r in steps) > 1  # some step did need more rounds


def test_a_generation_round_of_more_prompts_than_a_step_trains_on(tmp_path):
    # data.gen_batch_size=4, train_batch_size=2, one round a step: each round samples 4 prompts (the
    # loader hands out 4 at a time), and the step keeps the first 2 whose groups vary. With the
    # half-flat reward, a step that dropped d flat groups of the 4 keeps min(2, 4 - d) prompts
    flat = half_flat_reward(tmp_path)
    overrides = tiny_overrides(
        tmp_path,
        **{
            "data.train_batch_size": 2,
            "data.gen_batch_size": 4,
            "rollout.n": 4,
            "trainer.total_training_steps": 3,
            "algorithm.filter_groups.enable": True,
            "algorithm.filter_groups.max_num_gen_batches": 1,
            "reward.custom_function.path": str(flat),
        },
    )
    trainer = Trainer(load_config(None, overrides))
    run = trainer.fit()
    assert trainer.loader.batch_size == 4
    assert trainer.loader.epoch * len(trainer.loader) + trainer.loader.position == 3  # one round a step
    steps = [r for r in read_metrics(run) if "batch/num_gen_batches" in r]
    assert [r["batch/num_gen_batches"] for r in steps] == [1, 1, 1]
    for r in steps:
        assert r["batch/kept_prompts"] == min(2, 4 - r["batch/dropped_groups"])
