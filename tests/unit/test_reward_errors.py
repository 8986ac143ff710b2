"""Reward functions that raise, hang, or return NaN or a string, under each `reward.on_error` mode.

Each case writes a real reward function file and scores real batches with `RuleReward`: through
the reward process (with a time limit), and in the trainer's process (`timeout_s=0`) where a
function that returns cannot hang.
"""

import math
import time

import pytest
import torch

from turnrl.batch import Batch
from turnrl.models.loader import load_tokenizer
from turnrl.rewards.guard import ERRORS_KEY, RewardProcess
from turnrl.rewards.registry import BadScore, check_score
from turnrl.rewards.scorer import RewardFunctionError, RuleReward

MISBEHAVIOURS = {
    "raises": "raise KeyError('no such answer')",
    "hangs": "time.sleep(600)",
    "nan": "return float('nan')",
    "string": "return 'high'",
    # once a traceback and "ended the reward process (exit code -9)"; in the trainer's process,
    # SystemExit ended the run without a word
    "huge": "return 10**400",
    "exits": "raise SystemExit(5)",
}
EXPECTED = {
    "raises": "raised KeyError: 'no such answer' (reward_raises.py:",
    "hangs": "did not return within reward.timeout_s=1s",
    "nan": "returned nan, expected a finite number",
    "string": "returned str 'high', expected a number",
    "huge": "returned an integer too large for a float (about 401 digits), expected a finite number",
    "exits": "raised SystemExit: 5 (reward_exits.py:",
}
ROWS = 2


def reward_file(tmp_path, name: str) -> str:
    """A reward function that scores 1, except on rows marked `bad`, where it misbehaves."""
    path = tmp_path / f"reward_{name}.py"
    path.write_text(
        "import time\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if not extra_info.get('bad'):\n"
        "        return 1.0\n"
        f"    {MISBEHAVIOURS[name]}\n"
    )
    return str(path)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny-random")


def batch_of(tokenizer, bad: tuple[bool, ...] = (True,) * ROWS) -> Batch:
    """Rows of one response each; the reward functions above misbehave on the rows marked bad."""
    rows = len(bad)
    ids = torch.tensor([tokenizer("<answer>3</answer>", add_special_tokens=False)["input_ids"]] * rows)
    mask = torch.ones_like(ids, dtype=torch.float32)
    return Batch(
        tensors={
            "responses": ids,
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(rows, 2, dtype=torch.long), mask.long()], dim=1),
        },
        non_tensors={
            "data_source": ["my/task"] * rows,
            "ground_truth": ["3"] * rows,
            "extra_info": [{"bad": b} for b in bad],
            "index": [f"q{i}" for i in range(rows)],
        },
    )


def cases() -> list[tuple[str, float]]:
    # a hang needs the reward process; the rest run both there and in the trainer's process
    return [(name, timeout) for name in MISBEHAVIOURS for timeout in (1.0, 0.0) if timeout or name != "hangs"]


@pytest.fixture
def make_reward(tokenizer):
    made: list[RuleReward] = []

    def make(path: str, on_error: str, timeout_s: float) -> RuleReward:
        made.append(RuleReward(tokenizer, path, on_error=on_error, timeout_s=timeout_s))
        return made[-1]

    yield make
    for reward in made:
        reward.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "timeout_s"), cases())
@pytest.mark.parametrize("on_error", ["fail", "fail_first_step"])
def test_a_failure_in_the_first_step_stops_with_row_index_and_source(
    tmp_path, tokenizer, make_reward, name, timeout_s, on_error
):
    reward = make_reward(reward_file(tmp_path, name), on_error, timeout_s)
    with pytest.raises(RewardFunctionError) as err:
        reward(batch_of(tokenizer))
    line = str(err.value)
    assert "\n" not in line
    assert f"reward_{name}.py:compute_score {EXPECTED[name]}" in line
    assert "on row 0 (index 'q0', data_source 'my/task')" in line
    assert ("in the first training step" if on_error == "fail_first_step" else "in training") in line
    assert "reward.on_error=zero" in line


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "timeout_s"), cases())
def test_zero_scores_failed_rows_0_and_counts_them_from_the_first_step(
    tmp_path, tokenizer, make_reward, name, timeout_s
):
    reward = make_reward(reward_file(tmp_path, name), "zero", timeout_s)
    scores, extras = reward(batch_of(tokenizer, bad=(False, True)))
    assert scores.sum(-1).tolist() == [1.0, 0.0]
    assert extras[ERRORS_KEY] == [1.0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "timeout_s"), cases())
@pytest.mark.parametrize("on_error", ["zero", "fail_first_step"])
def test_after_the_first_step_failed_rows_score_0_and_are_counted(
    tmp_path, tokenizer, make_reward, name, timeout_s, on_error
):
    reward = make_reward(reward_file(tmp_path, name), on_error, timeout_s)
    first, extras = reward(batch_of(tokenizer, bad=(False, False)))
    assert first.sum(-1).tolist() == [1.0, 1.0] and extras[ERRORS_KEY] == [0.0]
    later, extras = reward(batch_of(tokenizer))
    assert later.sum(-1).tolist() == [0.0, 0.0]
    assert extras[ERRORS_KEY] == [2.0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "timeout_s"), cases())
def test_fail_stops_at_any_step(tmp_path, tokenizer, make_reward, name, timeout_s):
    reward = make_reward(reward_file(tmp_path, name), "fail", timeout_s)
    reward(batch_of(tokenizer, bad=(False, False)))
    with pytest.raises(
        RewardFunctionError, match=r"on row 0 \(index 'q0', data_source 'my/task'\) in training"
    ):
        reward(batch_of(tokenizer))


@pytest.mark.timeout(60)
def test_validation_before_training_is_strict_under_fail_first_step_and_does_not_end_it(
    tmp_path, tokenizer, make_reward
):
    reward = make_reward(reward_file(tmp_path, "raises"), "fail_first_step", 5.0)
    with pytest.raises(RewardFunctionError, match="in validation before training"):
        reward(batch_of(tokenizer), validation=True)
    with pytest.raises(RewardFunctionError, match="in the first training step"):
        reward(batch_of(tokenizer))


@pytest.mark.timeout(60)
def test_a_hang_costs_its_timeout_and_the_next_call_gets_a_fresh_process(tmp_path, tokenizer, make_reward):
    reward = make_reward(reward_file(tmp_path, "hangs"), "zero", 1.0)
    start = time.monotonic()
    scores, extras = reward(batch_of(tokenizer, bad=(True, False)))
    assert time.monotonic() - start < 30
    assert scores.sum(-1).tolist() == [0.0, 1.0] and extras[ERRORS_KEY] == [1.0]
    assert isinstance(reward.calls, RewardProcess) and reward.calls.restarts == 1


@pytest.mark.timeout(60)
def test_a_function_that_kills_its_process_is_a_failure_and_the_next_call_gets_a_fresh_one(
    tmp_path, tokenizer, make_reward
):
    path = tmp_path / "exits.py"
    path.write_text(
        "import os\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info.get('bad'):\n"
        "        os._exit(3)\n"
        "    return 1.0\n"
    )
    reward = make_reward(str(path), "zero", 5.0)
    scores, extras = reward(batch_of(tokenizer, bad=(True, False)))
    assert scores.sum(-1).tolist() == [0.0, 1.0] and extras[ERRORS_KEY] == [1.0]
    with pytest.raises(
        RewardFunctionError, match=r"ended the reward process \(exit code 3\) instead of returning"
    ):
        make_reward(str(path), "fail", 5.0)(batch_of(tokenizer))


def test_check_score_accepts_numbers_and_dicts_and_names_what_else_came_back():
    assert check_score(1) == (1.0, {})
    assert check_score(torch.tensor(0.25)) == (0.25, {})
    assert check_score({"score": 0.5, "acc": True, "note": "x"}) == (0.5, {"acc": 1.0})
    for value, message in [
        ("0.5", "returned str '0.5', expected a number"),
        (None, "returned NoneType None, expected a number"),
        ([1.0], "returned list, expected a number or a dict with 'score'"),
        (math.inf, "returned inf, expected a finite number"),
        ({"score": math.nan}, "returned nan, expected a finite number"),
        ({"acc": 1.0}, "returned a dict without 'score': ['acc']"),
    ]:
        with pytest.raises(BadScore) as err:
            check_score(value)
        assert str(err.value) == message
