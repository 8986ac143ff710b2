"""`turnrl eval` in agent mode: a multi-turn recipe runs through the trainer's AgentRollout."""

import json
import logging
import re

import httpx
import pytest

from turnrl.cli import main


@pytest.mark.timeout(180)
def test_calculator_agent_recipe_evaluates_episodes(tmp_path, capsys):
    out = tmp_path / "out"
    args = [
        "calculator_agent",
        "model.path=tiny-random",
        "data.max_response_length=24",
        "rollout.multi_turn.max_tokens_per_turn=8",
        "trainer.num_threads=1",
        "eval.max_prompts=2",
        "eval.n=2",
    ]
    code = main(["eval", *args, "--out", str(out)])
    printed, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["rollout"]["multi_turn"]["enable"] is True
    assert summary["counts"]["prompts"] == 2
    assert summary["counts"]["responses"] == {"greedy": 2, "sampled": 4}
    (source,) = summary["metrics"]["per_data_source"]
    assert source in printed
    # episode statistics come from the agent rollout, for both passes
    for name in ("greedy", "sampled"):
        diag = summary["diagnostics"][name]
        for key in (
            "agent_turns/mean",
            "agent_tool_calls/mean",
            "agent_truncated/mean",
            "response_length/mean",
        ):
            assert key in diag, (name, key)
        assert diag["agent_turns/mean"] >= 1
        assert diag["response_length/mean"] <= 24  # model tokens within the budget
    rows = [json.loads(line) for line in (out / "samples.jsonl").open()]
    assert len(rows) == 6
    assert all({"turns", "tool_calls", "invalid_actions", "truncated"} <= set(r) for r in rows)


@pytest.mark.timeout(180)
def test_search_agent_starts_and_stops_its_retriever(tmp_path, capsys, caplog):
    out = tmp_path / "out"
    args = ["search_agent", "model.path=tiny-random", "data.max_response_length=32", "trainer.num_threads=1"]
    with caplog.at_level(logging.WARNING, logger="turnrl.agent.tools.toolset"):
        code = main(["eval", *args, "eval.max_prompts=2", "eval.n=0", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    started = re.search(r"started turnrl's retriever at (http://\S+)", caplog.text)
    assert started, caplog.text
    with pytest.raises(httpx.TransportError):  # stopped with the evaluation
        httpx.post(started.group(1), json={"queries": ["x"], "topk": 1}, timeout=5)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["responses"] == {"greedy": 2}
    assert "pass@1" not in summary["metrics"]["overall"]  # no sampled pass
