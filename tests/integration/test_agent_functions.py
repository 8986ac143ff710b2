"""Agents written as plain functions against the OpenAI API (`rollout.agent.entrypoint`), end to end:
the real `openai` SDK as the agent's client, real HTTP to the gateway on loopback, the in-process
`hf` engine over tiny-random, and a chat template that renders tools (tests/support/chat_templates).

The agents are scripted (tests/support/agents/scripted.py): tiny-random writes noise, so each agent
decides its own moves, and the checks are about what the gateway recorded, token by token.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import httpx
import pytest

from tests.support.agent_batches import chat_prompt, segments, unpadded
from tests.support.agents.scripted import TOOLS
from tests.support.chat_templates import FORGETFUL_TEMPLATE, NO_TOOLS_TEMPLATE, TOOL_TEMPLATE
from tests.support.recording_engine import RecordingEngine
from turnrl.agent.functions.rollout import FunctionAgentRollout
from turnrl.batch import Batch
from turnrl.config import ConfigError, load_config
from turnrl.errors import TurnrlInputError
from turnrl.models.logprobs import response_log_probs
from turnrl.rewards.carried import AgentEpisodeError
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.chat.template import ChatTemplate
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.trainer.stages import group_and_merge, split_generation_input

AGENTS = Path(__file__).parents[1] / "support" / "agents"
SCRIPTED = AGENTS / "scripted.py"
BUDGET = 96
QUESTIONS = ["Compute 12 * 34.", "Hi."]


@pytest.fixture(scope="module")
def tiny_tool(tiny, tmp_path_factory):
    """tiny-random, and its tokenizer with a template that renders tools (written to a file, as
    `rollout.agent.chat_template` takes it)."""
    model, tok = tiny
    path = tmp_path_factory.mktemp("templates") / "tools.jinja"
    path.write_text(TOOL_TEMPLATE)
    path.with_name("no_tools.jinja").write_text(NO_TOOLS_TEMPLATE)
    tool_tok = copy.copy(tok)
    tool_tok.chat_template = TOOL_TEMPLATE
    return model, tok, tool_tok, str(path)


def make(tiny_tool, agent: str, engine=None, **overrides):
    model, tok, _, template = tiny_tool
    cfg = {
        "rollout.agent.entrypoint": f"{SCRIPTED}:{agent}",
        "rollout.agent.chat_template": template,
        "rollout.agent.timeout_s": 20,
        "data.max_response_length": BUDGET,
    }
    cfg.update(overrides)
    config = load_config(None, [f"{k}={v}" for k, v in cfg.items()])
    return FunctionAgentRollout(engine or HFEngine(model, tok), tok, config, tok.pad_token_id)


def rows_batch(tok, questions: list[str], source: str = "agent/test") -> Batch:
    """A generation batch as stage 2 lends it to a function-agent rollout: prompt tensors + rows."""
    ids, mask = left_pad([chat_prompt(tok, q) for q in questions], tok.pad_token_id)
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [[{"role": "user", "content": q}] for q in questions],
            "data_source": [source] * len(questions),
            "ground_truth": ["408"] * len(questions),
            "extra_info": [{"i": i} for i in range(len(questions))],
            "index": list(range(len(questions))),
        },
    )


def run(rollout, tok, questions=QUESTIONS, n=2, budget=BUDGET):
    """Stages 3 and 4: the rollout, merged with its rows as the reward stage gets them; seeded as a
    training step is."""
    rows = rows_batch(tok, questions)
    gen_batch = split_generation_input(rows, rows=True)
    out, metrics = rollout.generate(gen_batch, SamplingParams(max_new_tokens=budget, n=n, seed=7))
    return group_and_merge(rows, out, n), metrics


def test_tool_loop_is_recorded_token_by_token(tiny_tool):
    model, tok, tool_tok, _ = tiny_tool
    engine = RecordingEngine(model, tok)
    with make(tiny_tool, "tool_loop", engine) as rollout:
        batch, metrics = run(rollout, tok)
    assert len(batch) == 4
    template = ChatTemplate(tool_tok)
    # rows A,A,B,B: each episode's prompt is its first call's messages and tools, rendered
    for i, question in enumerate(QUESTIONS):
        expected = template.prompt_ids([{"role": "user", "content": question}], TOOLS)
        for row in (2 * i, 2 * i + 1):
            full, mask, lps = unpadded(batch, row)
            assert full[: len(full) - len(mask)] == expected
    assert metrics["agent/turns/mean"] == 3 and metrics["agent/calls/mean"] == 3
    assert metrics["agent/template_drift"] == 0 and metrics["agent/errors/exception"] == 0
    assert metrics["agent/fn/turns"] == 3.0 and "agent/fn/note" not in metrics  # numbers only
    assert list(batch["agent_reward"]) == [0.5] * 4 and list(batch["agent_error"]) == [""] * 4
    # a group's episodes open with the same context but sample apart: the step's seed (7) is not
    # passed on, so no two calls share a generator state (their tokens may still agree by chance)
    assert engine.seeds and all(seed is None for seed in engine.seeds), engine.seeds

    for row in range(4):
        full, mask, lps = unpadded(batch, row)
        prompt_len = len(full) - len(mask)
        runs = segments(batch, row)
        assert [kind for kind, _ in runs] == [1, 0, 1, 0, 1], runs  # sampled, delta, sampled, delta, sampled
        pos = prompt_len
        for kind, ids in runs:
            if kind == 1:
                # the sampled ids verbatim, right after the exact context the engine was given
                hits = [(c, o, lp) for c, o, lp in engine.rows if c == full[:pos] and o == ids]
                assert hits, f"row {row}: sampled ids at {pos} not found after their context"
                got = lps[pos - prompt_len : pos - prompt_len + len(ids)]
                assert got == pytest.approx(hits[0][2], abs=1e-6)
            else:
                # observation tokens: the template's own text for the new messages, tokenised alone
                text = tok.decode(ids, skip_special_tokens=False)
                assert template.encode(text) == ids
                assert "<|im_start|>tool\n" in text and text.endswith("<|im_start|>assistant\n"), text
                assert lps[pos - prompt_len : pos - prompt_len + len(ids)] == [0.0] * len(ids)
            pos += len(ids)
    # the trainer's own forward over the sample gives the rollout's log-probs on every model token
    lp, _ = response_log_probs(
        model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], BUDGET
    )
    gap = ((lp - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max().item()
    assert gap < 1e-4, gap


def test_async_agent_returns_messages_scored_by_the_rule(tiny_tool, tmp_path):
    _, tok, _, _ = tiny_tool
    with make(tiny_tool, "async_loop") as rollout:
        assert rollout.agent.is_async
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=3)
    assert len(batch) == 3 and metrics["agent/turns/mean"] == 2
    for row in range(3):
        # the answer is the last call's content as the gateway returned it
        last = segments(batch, row)[-1][1]
        assert batch["agent_answer"][row] == tok.decode(last, skip_special_tokens=True)
        assert batch["agent_reward"][row] is None
    scorer = tmp_path / "length_score.py"
    scorer.write_text(
        "def compute_score(source, text, truth, extra_info=None):\n    return float(len(text))\n"
    )
    reward = RuleReward(tok, str(scorer), timeout_s=0, agent_on_error="fail_first_step")
    scores, _ = reward(batch)
    assert scores.sum(-1).tolist() == [float(len(a)) for a in batch["agent_answer"]]


@pytest.mark.parametrize(
    ("agent", "kind", "said"),
    [
        ("raises", "exception", "raised ZeroDivisionError: division by zero (scripted.py:"),
        ("tools_refused", "exception", "the gateway answered 400: tools: the chat template does not render"),
        ("bad_return", "bad_return", "returned str 'correct'"),
        ("nan_return", "bad_return", "returned float nan"),
        ("no_calls", "no_calls", "returned without a model call"),
        ("hangs", "timeout", "did not return within rollout.agent.timeout_s=2s"),
        ("hangs_async", "timeout", "did not return within rollout.agent.timeout_s=2s"),
    ],
)
def test_failures_score_zero_are_counted_and_stop_the_first_step(tiny_tool, agent, kind, said):
    _, tok, _, _ = tiny_tool
    start = time.monotonic()
    no_tools = str(Path(tiny_tool[3]).with_name("no_tools.jinja"))
    extra = {"rollout.agent.chat_template": no_tools} if agent == "tools_refused" else {}
    with make(tiny_tool, agent, **{"rollout.agent.timeout_s": 2, **extra}) as rollout:
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=2)
    assert time.monotonic() - start < 15  # a hung agent is left behind at its timeout
    assert metrics[f"agent/errors/{kind}"] == 2, metrics
    assert all(said in e and "scripted.py:" + agent in e for e in batch["agent_error"]), batch["agent_error"]
    if kind != "no_calls":  # the sample keeps what was recorded: its first call
        assert batch["response_mask"].sum().item() > 0
    else:
        assert batch["response_mask"].sum().item() == 0

    # the first step stops, in one line naming the agent, the row and the fix
    reward = RuleReward(tok, timeout_s=0, agent_on_error="fail_first_step")
    with pytest.raises(AgentEpisodeError) as err:
        reward(batch)
    line = str(err.value)
    assert "\n" not in line and said in line and "in the first training step" in line
    assert "rollout.agent.on_error=zero" in line
    # after a first step that went well, such an episode scores 0 (and `zero` never stops)
    reward.trained = True
    scores, _ = reward(batch)
    assert scores.abs().sum().item() == 0
    scores, _ = RuleReward(tok, timeout_s=0, agent_on_error="zero")(batch)
    assert scores.abs().sum().item() == 0


def test_history_edited_by_the_agent_forks_the_sample(tiny_tool):
    model, tok, tool_tok, _ = tiny_tool
    engine = RecordingEngine(model, tok)
    with make(tiny_tool, "rewrites_history", engine) as rollout:
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=2)
    # the second call does not extend the first: the first sample is kept as recorded and a second
    # starts from the rewritten conversation, rendered whole; both carry the episode's reward
    assert metrics["agent/template_drift"] == 2 and metrics["agent/template_forks"] == 2
    assert metrics["agent/untrained_calls/mean"] == 0 and metrics["agent/calls/mean"] == 2
    assert metrics["agent/turns/mean"] == 2  # per episode, its samples' turns summed
    assert len(batch) == 4 and list(batch["episode_row"]) == [0, 0, 1, 1]
    assert list(batch["episode_last"]) == [False, True, False, True]
    assert list(batch["uid"]) == [0] * 4 and list(batch["agent_reward"]) == [1.0] * 4
    template = ChatTemplate(tool_tok)
    for row in range(4):
        full, mask, _ = unpadded(batch, row)
        prompt = full[: len(full) - len(mask)]
        assert [kind for kind, _ in segments(batch, row)] == [1]
        if row % 2:  # the fork's prompt: the second call's messages, as the engine was given them
            text = tok.decode(prompt, skip_special_tokens=False)
            assert "(summarised) " in text and text.endswith("Again.<|im_end|>\n<|im_start|>assistant\n")
        else:
            assert prompt == template.prompt_ids([{"role": "user", "content": QUESTIONS[0]}])
        assert any(c == prompt and o == segments(batch, row)[0][1] for c, o, _ in engine.rows)
    # the trainer reads each fork as the engine sampled it
    lp, _ = response_log_probs(
        model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], BUDGET
    )
    gap = ((lp - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max().item()
    assert gap < 1e-4, gap


def test_without_forks_a_drifted_call_is_served_untrained(tiny_tool):
    _, tok, _, _ = tiny_tool
    with make(tiny_tool, "rewrites_history", **{"rollout.agent.max_forks": 0}) as rollout:
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=2)
    assert metrics["agent/template_drift"] == 2 and metrics["agent/template_forks"] == 0
    assert metrics["agent/untrained_calls/mean"] == 1 and metrics["agent/turns/mean"] == 1
    assert len(batch) == 2 and list(batch["episode_last"]) == [True, True]
    assert [kind for kind, _ in segments(batch, 0)] == [1] and list(batch["agent_reward"]) == [1.0, 1.0]


def test_template_that_rewrites_history_forks_at_every_call(tiny_tool, tmp_path):
    _, tok, _, _ = tiny_tool
    forgetful = tmp_path / "forgetful.jinja"
    forgetful.write_text(FORGETFUL_TEMPLATE)
    overrides = {"rollout.agent.chat_template": str(forgetful), "rollout.agent.max_forks": 1}
    with make(tiny_tool, "tool_loop", **overrides) as rollout:
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=2)
    # calls 2 and 3 would render call 1's answer away: never re-tokenised. Call 2 forks (the one fork
    # allowed), call 3 drifts again with no fork left: served, not trained on
    assert metrics["agent/template_drift"] == 2 and metrics["agent/template_forks"] == 2
    assert metrics["agent/turns/mean"] == 2 and metrics["agent/untrained_calls/mean"] == 1
    assert len(batch) == 4 and all([kind for kind, _ in segments(batch, r)] == [1] for r in range(4))
    assert metrics["agent/errors/exception"] == 0 and list(batch["agent_reward"]) == [0.5] * 4


def test_limits_truncate_without_error_and_long_prompts_fail(tiny_tool):
    _, tok, _, _ = tiny_tool
    with make(tiny_tool, "many_calls", **{"rollout.agent.max_calls": 2}) as rollout:
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=1)
    # refused at its third call, the agent raised: truncated, not failed, and scores 0
    assert metrics["agent/turns/mean"] == 2 and metrics["agent/calls/mean"] == 3
    assert metrics["agent/errors/exception"] == 0 and metrics["agent/truncated_ratio"] == 1
    assert list(batch["finish_reason"]) == ["length"] and list(batch["agent_reward"]) == [0.0]
    with make(tiny_tool, "many_calls") as rollout:  # until the response budget is spent
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=1, budget=40)
    assert metrics["agent/truncated_ratio"] == 1 and metrics["agent/errors/exception"] == 0
    assert metrics["agent/calls/mean"] == metrics["agent/turns/mean"] + 1  # the refused call
    assert list(batch["finish_reason"]) == ["length"]
    with make(tiny_tool, "one_call", **{"data.max_prompt_length": 8}) as rollout:
        batch, metrics = run(rollout, tok, QUESTIONS[:1], n=1)
    assert metrics["agent/errors/prompt_too_long"] == 1
    assert "over data.max_prompt_length=8" in batch["agent_error"][0]


@pytest.mark.parametrize(
    ("entrypoint", "said"),
    [
        ("missing.py:run", "rollout.agent.entrypoint: file not found: missing.py"),
        (f"{SCRIPTED}:nope", "defines no 'nope'"),
        (f"{SCRIPTED}:not_callable", "'not_callable' in"),
        ("no_such_package.agents:run", "cannot import module 'no_such_package.agents'"),
    ],
)
def test_bad_entrypoint_is_one_line_at_start(tiny_tool, entrypoint, said):
    with pytest.raises(TurnrlInputError) as err:
        make(tiny_tool, "one_call", **{"rollout.agent.entrypoint": entrypoint})
    assert said in str(err.value) and "\n" not in str(err.value)


def test_config_rules(tiny_tool):
    with pytest.raises(ConfigError, match=r"must be path/to/file\.py:function"):
        load_config(None, ["rollout.agent.entrypoint=agent.py"])
    with pytest.raises(ConfigError, match="two agent modes: choose one"):
        load_config(None, ["rollout.agent.entrypoint=a.py:run", "rollout.multi_turn.enable=true"])
    with pytest.raises(ConfigError, match=r"'rollout\.agent\.max_concurrency' must be >= 1"):
        load_config(None, ["rollout.agent.entrypoint=a.py:run", "rollout.agent.max_concurrency=0"])


def test_gateway_refuses_in_one_line(tiny_tool):
    """The gateway's HTTP surface: key, episode, unknown fields, n, NaN, the model's name, tools the
    template cannot show."""
    with make(tiny_tool, "one_call") as rollout:
        gw = rollout.gateway
        e1 = gw.open("e1", SamplingParams(max_new_tokens=8))
        sibling = gw.open("e1b", SamplingParams(max_new_tokens=8))
        url = gw.base_url("e1") + "/chat/completions"
        auth = {"Authorization": f"Bearer {e1.key}"}
        hello = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        with httpx.Client(trust_env=False, timeout=30) as http:
            assert http.post(url, json=hello).status_code == 401
            wrong = http.post(url, json=hello, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 404 and "unknown to this key" in wrong.json()["detail"]
            # a sibling episode's key opens neither this episode nor writes into it; its own, yes
            other_key = {"Authorization": f"Bearer {sibling.key}"}
            assert http.post(url, json=hello, headers=other_key).status_code == 404
            assert e1.trajectory.calls == 0 and sibling.key != e1.key
            mine = http.post(gw.base_url("e1b") + "/chat/completions", json=hello, headers=other_key)
            assert mine.status_code == 200 and sibling.trajectory.calls == 1 and e1.trajectory.calls == 0

            def refused(body, status=400):
                r = http.post(url, json=body, headers=auth)
                assert r.status_code == status, r.text
                return r.json()["detail"]

            assert "did you mean 'max_tokens'" in refused({**hello, "max_token": 2})
            assert "n: must be 1" in refused({**hello, "n": 2})
            nan = http.post(url, content=b'{"messages": [], "temperature": NaN}', headers=auth)
            assert nan.status_code == 400
            assert "send the `model` that run() was given ('policy')" in refused(
                {**hello, "model": "gpt-4o"}, 404
            )
            other = gw.base_url("nope") + "/chat/completions"
            assert http.post(other, json=hello, headers=auth).status_code == 404
            ok = http.post(url, json=hello, headers=auth)
            assert ok.status_code == 200 and ok.json()["object"] == "chat.completion"
            assert http.get(gw.base_url("e1") + "/models", headers=auth).json()["data"][0]["id"] == "policy"
        gw.close_episode("e1")
        gw.close_episode("e1b")
    # a template that renders no tools: a tool list is refused, not silently dropped
    no_tools = str(Path(tiny_tool[3]).with_name("no_tools.jinja"))
    with make(tiny_tool, "one_call", **{"rollout.agent.chat_template": no_tools}) as rollout:
        gw = rollout.gateway
        e2 = gw.open("e2", SamplingParams(max_new_tokens=8))
        body = {**hello, "tools": TOOLS}
        auth = {"Authorization": f"Bearer {e2.key}"}
        r = httpx.post(
            gw.base_url("e2") + "/chat/completions", json=body, headers=auth, trust_env=False, timeout=30
        )
        assert r.status_code == 400 and "does not render tools" in r.json()["detail"]
