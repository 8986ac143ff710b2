"""mini-swe-agent, unchanged, trained one GRPO step on `tiny-random` as a process agent on Harbor
tasks (`data.task=harbor:<folder>`): its own CLI through the launcher `turnrl.agent.harness.mini_swe_agent`,
litellm calling the gateway, its commands run in each episode's sandbox session (turnrl's own child
sandbox), the task's verifier scoring what the episode left there.

One episode's first two turns are scripted (a bash call applying the task's reference solution, then
mini-swe-agent's submission command): it must score 1.0. The other is the tiny model's own noise,
which mini-swe-agent cannot read as a tool call: it scores 0.0, by the verifier as well. Checked
besides: every model run recorded is the engine's own row after its exact context, no episode
failed, and no session outlives the step.

Skipped, with the reason, where mini-swe-agent is not installed (`pip install -e ".[agent-frameworks]"`).
"""

from __future__ import annotations

import itertools
import json
import sys

import pytest

from tests.support.agent_batches import segments, unpadded
from tests.support.harbor_runs import SessionsAfterGen, task_folder
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.gateway.engine_runner import EngineRunner
from turnrl.agent.harbor.reader import read_task
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

pytest.importorskip(
    "minisweagent", reason="mini-swe-agent is not installed (pip install -e '.[agent-frameworks]')"
)

TASKS = ("numbers/mean_fix", "numbers/clamp")
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def bash_call(command: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"


def assert_recorded_as_sampled(batch, row: int, engine) -> None:
    """Every model run of the row is one of the engine's rows, right after that row's exact context."""
    full, mask, _ = unpadded(batch, row)
    pos = len(full) - len(mask)
    rows = [(r.context, r.ids) for r in engine.rows]
    runs = segments(batch, row)
    assert runs and runs[0][0] == 1, runs
    for kind, ids in runs:
        if kind == 1:
            assert (full[:pos], ids) in rows, f"row {row}: the ids at {pos} are not the engine's"
        pos += len(ids)


@pytest.mark.slow  # ~40 s: the default run keeps mini-swe-agent's environment and workspace tests
@pytest.mark.timeout(600)
def test_mini_swe_agent_trains_a_step_on_harbor_tasks(tmp_path):
    folder = task_folder(tmp_path / "tasks", TASKS)
    solutions = {
        read_task(folder / k.split("/")[1]).instruction.strip()[:60]: read_task(
            folder / k.split("/")[1]
        ).solve_sh()
        for k in TASKS
    }
    command = f"{sys.executable} -m turnrl.agent.harness.mini_swe_agent -c agent.step_limit=3"
    overrides = {
        "model.path": "tiny-random",
        "data.task": f"harbor:{folder}",
        "data.task_args": "{val_share: 0.5}",
        "data.train_batch_size": 1,
        "data.max_prompt_length": 1536,
        "data.max_response_length": 512,
        "rollout.n": 2,
        "rollout.multi_turn.enable": "false",
        "rollout.multi_turn.workspace.workers": 2,
        "rollout.agent.command": command,
        "rollout.agent.timeout_s": 240,
        "actor.ppo_mini_batch_size": 1,
        "trainer.total_training_steps": 1,
        "trainer.test_freq": 0,
        "trainer.val_before_train": "false",
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
        "algorithm.rollout_correction.bypass": "false",  # scripted turns carry no true log-probs
    }
    keep = SessionsAfterGen()
    trainer = Trainer(load_config(None, [f"{k}={v}" for k, v in overrides.items()]), hooks=[keep])
    tok, rollout = trainer.tokenizer, trainer.rollout
    firsts = itertools.count()

    def script(context: list[int]) -> list[int] | None:
        text = tok.decode(context)
        turn = text.count("<|im_start|>assistant")  # 1: the episode's first call
        if turn > 1 and "Reference solution" in text:  # the scripted episode, its fix made
            return tok(bash_call(SUBMIT), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if turn > 1 or next(firsts) % 2:
            return None  # the tiny model's own
        fix = next(v for k, v in solutions.items() if k in text)
        return tok(bash_call(fix), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    engine = ScriptedEngine(script, inner=rollout.gateway.runner.engine)
    rollout.gateway.runner.close()  # its batcher holds the engine: a new runner over the scripted one
    rollout.gateway.runner = EngineRunner(engine, rollout.ac.max_concurrency)
    keep.endpoint = lambda: rollout.agent.fn.server.endpoint
    trainer.fit()

    b = keep.batches["reward"]
    assert list(b["agent_error"]) == [""] * len(b), list(b["agent_error"])
    assert sorted(b["agent_reward"]) == [0.0, 1.0], list(b["agent_reward"])  # the verifier's rewards
    assert [float(s) for s in b["token_level_scores"].sum(-1)] == list(b["agent_reward"])
    for row in range(len(b)):
        assert_recorded_as_sampled(b, row, engine)
    assert keep.live_after_gen == [0]  # every episode's session was removed after its reward
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in rows if "critic/score/mean" in r]
    assert step["agent/calls/mean"] >= 1 and step["agent/errors/workspace"] == 0
    assert "actor/pg_loss" in step
