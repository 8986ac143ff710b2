"""`turnrl train` with an agent as a process (`rollout.agent.command`): a Python script on the
`openai` SDK, configured by its environment alone, trains on tiny-random's calculator task while
one of its episodes fails (exits non-zero) and is counted; and a command that is not there stops
the run at start-up in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import console_script, one_line_error

# the first episode to claim the marker exits 3; every other one answers and rewards itself
AGENT = """
import json, os, sys
from openai import OpenAI

row = json.load(sys.stdin)
client = OpenAI(max_retries=0)
out = client.chat.completions.create(model=os.environ["TURNRL_MODEL"], messages=row["prompt"], max_tokens=8)
try:
    os.close(os.open(os.path.join(sys.argv[1], "failed"), os.O_CREAT | os.O_EXCL))
except FileExistsError:
    print("reward:", 1.0 if row["ground_truth"] in (out.choices[0].message.content or "") else 0.5)
else:
    sys.exit("this episode fails on purpose")
"""


def overrides(tmp_path: Path, command: str) -> list[str]:
    return [
        "model.path=tiny-random",
        "data.task=calculator",
        "data.task_args.n_train=8",
        "data.task_args.n_val=2",
        "data.train_batch_size=2",
        "data.val_batch_size=2",
        "data.max_response_length=32",
        "rollout.n=2",
        "rollout.multi_turn.enable=false",
        f"rollout.agent.command={command}",
        "rollout.agent.timeout_s=60",
        "rollout.agent.on_error=zero",
        "actor.ppo_mini_batch_size=1",
        "actor.ppo_micro_batch_size=4",
        "trainer.total_training_steps=1",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
def test_python_process_agent_trains_a_step_with_a_failed_episode(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text(textwrap.dedent(AGENT).lstrip())
    command = f"{sys.executable} {agent} {tmp_path}"
    proc = subprocess.run(
        [console_script(), "train", *overrides(tmp_path, command)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in rows if "critic/score/mean" in r]
    assert step["agent/errors/nonzero_exit"] == 1 and step["agent/errors/timeout"] == 0
    assert step["agent/turns/mean"] == 1 and "actor/pg_loss" in step
    assert 0.5 * 3 / 4 <= step["critic/score/mean"] <= 3 / 4  # three episodes rewarded, one scored 0
    assert "val/test_score/mean" in rows[-1]


def test_missing_command_stops_at_start_up(tmp_path, cli):
    line = one_line_error(cli("train", *overrides(tmp_path, "no-such-agent-binary --flag")))
    assert line == "turnrl train: rollout.agent.command: 'no-such-agent-binary' is not a command on PATH"
    assert not (tmp_path / "run").exists()
