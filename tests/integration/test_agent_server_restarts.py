"""turnrl's own tool servers (child processes) killed mid-run: restarted once and the run goes on; killed
again, the run stops with one line naming the server and its log.

Real children, a real SIGKILL, real tool calls through `AgentRollout` (a scripted policy that calls
the tool once per episode, then answers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

import pytest

from tests.support.fault_episodes import observation_text
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.rollout import AgentRollout
from turnrl.agent.tools.base import FatalToolError
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.models.loader import load_tokenizer
from turnrl.rollout.base import SamplingParams
from turnrl.tasks.search.corpus import builtin_index
from turnrl.tensors import left_pad, position_ids_from_mask

CASES = {  # tool: (action, what its observation shows, the server's name in messages)
    "python": ("<code>print(6 * 7)</code>", "42", "code sandbox"),
    "search": ("<search>Dransk river</search>", "Doc 1(Title: ", "retriever"),
}


def pid_of(child) -> int:
    return child.process.pid if hasattr(child, "process") else child.proc.pid


def episode(agent: AgentRollout, tok, prompt: list[int]) -> tuple[str, dict[str, float]]:
    ids, mask = left_pad([prompt], tok.pad_token_id)
    gen = Batch({"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)})
    batch, metrics = agent.generate(gen, SamplingParams(max_new_tokens=96, n=1, seed=0))
    return observation_text(tok, batch, 0), metrics


@pytest.mark.timeout(180)
@pytest.mark.parametrize("tool", list(CASES))
def test_killed_child_is_restarted_once_then_the_run_stops(tool, tmp_path, caplog):
    action, shown, what = CASES[tool]
    tok = load_tokenizer("tiny-random")

    def enc(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    prompt = enc("Use the tool.")
    engine = ScriptedEngine(
        lambda c: enc(action) if len(c) == len(prompt) else [*enc("<answer>done</answer>"), tok.eos_token_id],
        eos_ids={tok.eos_token_id},
    )
    overrides = {
        "rollout.multi_turn.enable": True,
        "rollout.multi_turn.tools": f"[{tool}]",
        "rollout.multi_turn.max_turns": 1,
        "rollout.multi_turn.max_obs_length": 48,
        "rollout.multi_turn.python.workers": 1,
        "model.cache_dir": str(tmp_path),
    }
    cfg = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    log_file: Path | None = None
    with AgentRollout(engine, tok, cfg, tok.pad_token_id, default_index=builtin_index) as agent:
        (child,) = agent.toolset._children
        url = child.url
        text, metrics = episode(agent, tok, prompt)
        assert shown in text and metrics["servers/restarts"] == 0

        os.kill(pid_of(child), signal.SIGKILL)
        text, metrics = episode(agent, tok, prompt)  # the call meets the dead server: restart, then answer
        assert shown in text, text
        assert metrics["servers/restarts"] == 1 and metrics["agent/tool_error_ratio"] == 0.0
        assert child.alive() and child.url == url  # same port: every client keeps its URL

        os.kill(pid_of(child), signal.SIGKILL)
        caplog.clear()
        with caplog.at_level(logging.ERROR), pytest.raises(FatalToolError) as err:
            episode(agent, tok, prompt)
        message = str(err.value)
        base = url.removesuffix("/retrieve")
        assert "\n" not in message, message
        assert message.startswith(f"turnrl's {what} at {base}"), message
        assert "died again after 1 restart (killed by SIGKILL); its log: " in message, message
        log_file = Path(message.rsplit("its log: ", 1)[1])
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert [r.getMessage() for r in errors] == [message]  # one line, once
    assert log_file.is_file() and log_file.stat().st_size > 0  # kept for reading after the run stopped
    log_file.unlink()
    with contextlib.suppress(OSError):  # the retriever's log has a directory of its own
        log_file.parent.rmdir()
