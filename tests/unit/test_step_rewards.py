"""Step rewards from tools (`rollout.multi_turn.step_rewards`): the `ToolResult.reward` contract
through the executor, the built-in tools' rewards, and the loop carrying one reward per model turn
into the batch as `turn_rewards` (weighted), off by default."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tests.support.agent_batches import agent_cfg, encode, gen_batch
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.actions import Action
from turnrl.agent.episode import Episode
from turnrl.agent.executor import ToolCall, ToolExecutor, ToolOutcome
from turnrl.agent.loop import EpisodeLoop
from turnrl.agent.rollout import AgentRollout
from turnrl.agent.tools.base import FatalToolError, ToolResult, text_parameter
from turnrl.agent.tools.step_rewards import evidence, new_evidence, program_ran, well_formed
from turnrl.agent.tools.toolset import TOOLS
from turnrl.algorithms.turn_credit import turn_spans
from turnrl.rollout.base import SamplingParams


class Rewarding:
    """A tool whose every call returns `reward` with its text (through `call_batch` if `batched`)."""

    description, parameters = "rewards", text_parameter("input", "anything")

    def __init__(self, reward, batched: bool = False):
        self.name, self.reward = "rewarder", reward
        if batched:
            self.call_batch = self._batch

    async def call(self, arguments):
        return ToolResult("ok", reward=self.reward)

    async def _batch(self, arguments):
        return [ToolResult("ok", reward=self.reward) for _ in arguments]


def run_calls(tool, n: int = 1) -> list[ToolOutcome]:
    executor = ToolExecutor({tool.name: tool})
    try:
        return executor.run([ToolCall(tool.name, {"input": "x"}) for _ in range(n)])
    finally:
        executor.close()


@pytest.mark.parametrize("batched", [False, True], ids=["call", "call_batch"])
def test_a_tools_step_reward_rides_with_its_outcome(batched):
    assert [o.reward for o in run_calls(Rewarding(0.5, batched), 2)] == [0.5, 0.5]
    assert [o.reward for o in run_calls(Rewarding(None, batched))] == [None]
    assert run_calls(Rewarding(2, batched))[0].reward == 2.0  # an int is a number


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1", True, [1.0]])
@pytest.mark.parametrize("batched", [False, True], ids=["call", "call_batch"])
def test_a_step_reward_that_is_not_a_finite_number_is_one_line_naming_the_tool(bad, batched):
    with pytest.raises(
        FatalToolError, match=r"^tool 'rewarder' returned the step reward .*finite number"
    ) as err:
        run_calls(Rewarding(bad, batched))
    assert "\n" not in str(err.value)


def test_the_built_in_tools_have_their_step_rewards():
    assert TOOLS["calculator"].step_reward is well_formed
    assert TOOLS["python"].step_reward is program_ran
    assert TOOLS["search"].step_reward is new_evidence
    assert well_formed(ToolOutcome("5"), {}, {}) == 1.0
    assert well_formed(ToolOutcome("error: division by zero", True), {}, {}) == 0.0
    assert program_ran(ToolOutcome("hi", metrics={"timed_out": 0.0, "exit_nonzero": 0.0}), {}, {}) == 1.0
    assert (
        program_ran(ToolOutcome("Traceback", metrics={"timed_out": 0.0, "exit_nonzero": 1.0}), {}, {}) == 0.0
    )
    assert (
        program_ran(ToolOutcome("[timed out]", metrics={"timed_out": 1.0, "exit_nonzero": 1.0}), {}, {})
        == 0.0
    )
    assert program_ran(ToolOutcome("error: sandbox", True), {}, {}) == 0.0


def search_row() -> dict:
    """A two-hop training row of the search task, as the loader hands it to the rollout."""
    from turnrl.tasks.search import rows

    row = next(r for r in rows("train", 0) if r["extra_info"]["bridge"])
    return {"ground_truth": row["reward_model"]["ground_truth"], "extra_info": row["extra_info"]}


def test_search_pays_the_bridge_and_the_answer_once_each():
    row = search_row()
    bridge, answer = row["extra_info"]["bridge"], row["ground_truth"]["target"][0]
    assert evidence(row)[0] == bridge.lower() and answer.lower() in evidence(row)
    memo: dict = {}
    first = ToolOutcome(f"Doc 1(Title: A firm) The firm was founded by {bridge}.\nDoc 2(Title: B) Nothing.")
    assert new_evidence(first, row, memo) == 1.0  # the first hop found the bridge
    assert new_evidence(first, row, memo) == 0.0  # the same search again: nothing new
    second = ToolOutcome(f"Doc 1(Title: {bridge}) {bridge} was born in {answer}.")
    assert new_evidence(second, row, memo) == 1.0  # the second hop found the answer
    assert new_evidence(second, row, memo) == 0.0
    assert (
        new_evidence(ToolOutcome(f"Doc 1(Title: X) {bridge}s and {answer}0."), row, {}) == 0.0
    )  # whole words
    assert new_evidence(ToolOutcome(f"error: retriever down {bridge}", True), row, {}) == 0.0
    one_hop = {"ground_truth": {"target": ["Ashgrove"]}, "extra_info": {"bridge": None}}
    assert new_evidence(ToolOutcome("Doc 1(Title: P) born in the town of Ashgrove."), one_hop, {}) == 1.0
    assert evidence({"ground_truth": {"tests": []}}) == []  # a ground truth with no answer in it


def test_a_turns_reward_is_the_mean_over_its_calls_that_give_one():
    e = Episode([1])
    e.add_model([5, 6], [0.0, 0.0])
    calls = [ToolCall("a", {}), ToolCall("b", {}), ToolCall("c", {})]
    loop = SimpleNamespace(
        stats=SimpleNamespace(per_tool={"a": {"step_reward": []}, "b": {"step_reward": []}})
    )
    builtins = {"b": lambda o, row, memo: 0.0 if o.error else 1.0}
    results = [ToolOutcome("x", reward=0.25), ToolOutcome("y"), ToolOutcome("z")]  # c gives none
    EpisodeLoop._reward_turn(loop, e, Action("tool", calls), results, builtins)  # type: ignore[arg-type]
    assert e.turn_rewards == [0.625]
    e.add_observation([9])
    e.add_model([7], [0.0])
    e.add_model([8], [0.0])  # the same run of model tokens: still one turn
    assert e.turn_rewards == [0.625, 0.0]


REWARDER = """
from turnrl.agent.tools.base import ToolResult, text_parameter

class Rewarder:
    name, description = "rewarder", "pays a quarter"
    parameters = text_parameter("input", "anything")

    async def call(self, arguments):
        return ToolResult("ok", reward=0.25)
"""


def play(tmp_path, step_rewards: bool, patch=None):
    """Two prompts, two episodes each, fully scripted: A calls the calculator well, then badly, then
    answers; B calls the custom tool, then answers."""
    (tmp_path / "rewarder.py").write_text(REWARDER)
    extra = {
        "rollout.multi_turn.custom_tools": f"[{tmp_path / 'rewarder.py'}:Rewarder]",
        "algorithm.adv_estimator": "gigpo",
        "rollout.n": 2,
    }
    if step_rewards:
        extra |= {"rollout.multi_turn.step_rewards": True, "rollout.multi_turn.step_reward_weight": 0.5}
    cfg = agent_cfg(tmp_path, **extra)
    from turnrl.models.loader import load_tokenizer

    tok = load_tokenizer("tiny-random")

    def script(context: list[int]) -> list[int]:
        text = tok.decode(context)
        if "Compute 2 + 3" in text:
            turns, k = (
                ["<calculator>2 + 3</calculator>", "<calculator>2 +</calculator>", "<answer>5</answer>"],
                text.count("</result>"),
            )
        else:
            turns, k = ["<rewarder>x</rewarder>", "<answer>1</answer>"], text.count("</observation>")
        ids = encode(tok, turns[k])
        return [*ids, tok.eos_token_id] if "answer" in turns[k] else ids

    agent = AgentRollout(ScriptedEngine(script, eos_ids={tok.eos_token_id}), tok, cfg, tok.pad_token_id)
    try:
        if patch is not None:
            agent.loop.step_rewards["calculator"] = patch
        g = gen_batch(tok, ["Compute 2 + 3.", "Say 1."])
        g["extra_info"] = np.array([{"k": 0.8}, {"k": 0.3}], dtype=object)
        return agent.wants_rows, *agent.generate(g, SamplingParams(max_new_tokens=96, n=2))
    finally:
        agent.close()


def test_the_loop_carries_one_weighted_reward_per_turn_into_the_batch(tmp_path):
    wants_rows, batch, metrics = play(tmp_path, step_rewards=True)
    assert wants_rows  # the rows' own fields reach the rollout (the search reward reads them)
    # A: a well-formed calculator call (1), a malformed one (0), the answer; B: the custom tool's 0.25,
    # the answer; each times step_reward_weight 0.5
    assert [list(r) for r in batch["turn_rewards"]] == [[0.5, 0.0, 0.0]] * 2 + [[0.125, 0.0]] * 2
    for row, rewards in zip(batch["response_mask"].tolist(), batch["turn_rewards"], strict=True):
        assert len(turn_spans(row)) == len(rewards)  # one per model turn, as the estimators read them
    assert metrics["agent/tool/calculator/step_reward/mean"] == 0.5  # unweighted, per call
    assert metrics["agent/tool/rewarder/step_reward/mean"] == 0.25


def test_step_rewards_read_the_episodes_row(tmp_path):
    _, batch, _ = play(tmp_path, True, patch=lambda outcome, row, memo: row["extra_info"]["k"])
    assert [list(r) for r in batch["turn_rewards"]][:2] == [[0.4, 0.4, 0.0]] * 2


def test_off_by_default_no_turn_rewards(tmp_path):
    wants_rows, batch, metrics = play(tmp_path, step_rewards=False)
    assert not wants_rows and "turn_rewards" not in batch
    assert not any("step_reward" in k for k in metrics)
