"""`turnrl train` with an agent written against the OpenAI API (`rollout.agent.entrypoint`): a real
run of the console script on tiny-random with the example calculator agent (examples/agents), and the
one-line stops at start-up and in the first step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.cli import console_script, one_line_error

AGENTS = Path(__file__).parents[1] / "support" / "agents"
EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "calculator_openai.py"


def overrides(tmp_path: Path, agent: str) -> list[str]:
    """The calculator task with the smallest sizes; tools rendered by a template that shows them."""
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    return [
        "model.path=tiny-random",
        "data.task=calculator",
        "data.task_args.n_train=8",
        "data.task_args.n_val=2",
        "data.train_batch_size=2",
        "data.val_batch_size=2",
        "data.max_response_length=48",
        "rollout.n=2",
        f"rollout.agent.entrypoint={agent}",
        f"rollout.agent.chat_template={template}",
        "rollout.agent.timeout_s=60",
        "actor.ppo_mini_batch_size=1",
        "actor.ppo_micro_batch_size=4",
        "trainer.total_training_steps=2",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]


def test_calculator_agent_trains_through_turnrl_train(tmp_path):
    agent = f"{EXAMPLE}:run"
    proc = subprocess.run(
        [console_script(), "train", *overrides(tmp_path, agent)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert len(steps) == 2
    last = steps[-1]
    for key in ("agent/turns/mean", "agent/calls/mean", "agent/template_drift", "agent/errors/exception"):
        assert key in last, key
    assert last["agent/turns/mean"] >= 1 and last["agent/errors/exception"] == 0
    assert "agent/fn/called_right" in last and "agent/fn/acc" in last  # the agent's own numbers
    assert "actor/pg_loss" in last and "val/test_score/mean" in rows[-1]
    # the agent's own acc / formatted: validation reports them apart from the reward
    assert 0 <= rows[-1]["val/accuracy"] <= 1 and 0 <= rows[-1]["val/format_rate"] <= 1


def test_failing_agent_stops_the_first_step_in_one_line(tmp_path, cli):
    agent = f"{AGENTS / 'scripted.py'}:raises"
    line = one_line_error(cli("train", *overrides(tmp_path, agent)))
    assert line.startswith(f"turnrl train: agent {agent} raised ZeroDivisionError: division by zero"), line
    assert "in the first training step" in line and "rollout.agent.on_error=zero" in line


def test_missing_agent_stops_at_start_up(tmp_path, cli):
    line = one_line_error(cli("train", *overrides(tmp_path, "nowhere/agent.py:run")))
    assert line == "turnrl train: rollout.agent.entrypoint: file not found: nowhere/agent.py"
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_an_agent_that_rewrites_its_history_trains_on_its_forks(tmp_path):
    """Every episode forks once (its second call drops the first answer): each step trains on
    2 prompts x 2 episodes x 2 samples, and validation still averages one score per episode."""
    agent = f"{AGENTS / 'scripted.py'}:rewrites_history"
    args = [*overrides(tmp_path, agent), "data.task_args.n_val=3", "data.val_batch_size=3"]
    proc = subprocess.run([console_script(), "train", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert len(steps) == 2
    for step in steps:
        assert step["agent/template_forks"] == 4 and step["agent/untrained_calls/mean"] == 0
        assert step["agent/template_drift"] == 4 and step["agent/turns/mean"] == 2
        assert step["critic/score/mean"] == 1.0  # the agent's own reward, on every fork
    assert rows[-1]["val/test_score/mean"] == 1.0
    dump = sorted((tmp_path / "run" / "val_samples").glob("step_*.jsonl"))[-1]
    assert len(dump.read_text().splitlines()) == 3  # one per validation episode, not one per fork
