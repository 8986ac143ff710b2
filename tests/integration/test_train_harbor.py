"""A Harbor task trained through the real loop: `data.task=harbor:<folder>` on `tiny-random`, one
GRPO step; each episode gets a sandbox session from turnrl's own child sandbox, the `editor` tool
edits the task's files in it, and the task's tests/test.sh scores what the episode left there."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.support.harbor_runs import SessionsAfterGen, task_folder
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.harbor.demos import parse_solve
from turnrl.agent.harbor.reader import read_task
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

RECIPE = Path(__file__).parents[2] / "examples" / "harbor_agent.yaml"
TASKS = ("numbers/mean_fix", "numbers/clamp")


def fix_call(task_dir: Path) -> str:
    """The task's own solution as one assistant turn of editor calls (str_replace per edit)."""
    task = read_task(task_dir)
    edits = parse_solve(task.name, task.solve_sh() or "")
    calls = []
    for e in edits:
        arguments = {"command": "str_replace", "path": e.path}
        arguments |= {"file_text": e.new} if e.old is None else {"old_str": e.old, "new_str": e.new}
        if e.old is None:
            arguments["command"] = "create"
        calls.append(f"<tool_call>{json.dumps({'name': 'editor', 'arguments': arguments})}</tool_call>")
    return "".join(calls)


@pytest.mark.timeout(600)
def test_a_harbor_task_is_verified_in_the_episodes_own_session(tmp_path):
    folder = task_folder(tmp_path / "tasks", TASKS)
    fixes = {
        read_task(folder / k.split("/")[1]).instruction.strip()[:60]: fix_call(folder / k.split("/")[1])
        for k in TASKS
    }
    overrides = {
        "model.path": "tiny-random",
        "data.task": f"harbor:{folder}",
        "data.task_args": "{val_share: 0.5}",
        "data.train_batch_size": 1,
        "data.max_prompt_length": 1024,
        "data.max_response_length": 640,
        "rollout.n": 4,
        "rollout.multi_turn.max_turns": 2,
        "rollout.multi_turn.max_tokens_per_turn": 320,
        "rollout.multi_turn.workspace.workers": 2,
        "actor.ppo_mini_batch_size": 1,
        "trainer.total_training_steps": 1,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
        "algorithm.rollout_correction.bypass": "false",  # scripted turns carry no true log-probs
    }
    keep = SessionsAfterGen()
    trainer = Trainer(load_config(RECIPE, [f"{k}={v}" for k, v in overrides.items()]), hooks=[keep])
    tok, rollout = trainer.tokenizer, trainer.rollout
    firsts = itertools.count()

    def script(context: list[int]) -> list[int] | None:
        # every other episode fixes the task in its first turn and then stops; the others are the
        # tiny model's own (which cannot fix anything)
        text = tok.decode(context)
        if text.count("</tool_call>") > 1:  # after the fix (the prompt's tool line holds one)
            return tok("The fix is made.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if next(firsts) % 2:
            return None
        fix = next(v for k, v in fixes.items() if k in text)
        return tok(fix, add_special_tokens=False)["input_ids"]

    rollout.loop.engine = ScriptedEngine(script, inner=rollout.loop.engine)
    keep.endpoint = lambda: rollout.toolset.services.workspace
    trainer.fit()

    b = keep.batches["reward"]
    rewards = list(b["agent_reward"])
    assert rewards[0::2] == [1.0, 1.0] and rewards[1::2] == [0.0, 0.0], rewards
    assert list(b["agent_error"]) == [""] * 4
    assert [
        float(s) for s in b["token_level_scores"].sum(-1)
    ] == rewards  # the verifier's reward is the score
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if "workspace/failed" in r]
    assert row["workspace/verified_reward/mean"] == 0.5 and row["workspace/failed"] == 0.0
    assert row["agent/tool_calls/mean"] >= 0.5
    assert keep.live_after_gen == [0]  # every episode's session was removed after its reward
