"""Streaming agent rollouts (async RL): each episode runs its own turns, so a slow tool call holds back
only its own episode, while the batch still comes back in input order with per-turn policy versions.

Model turns that must be exact tool calls are scripted (`ScriptedEngine`); the rest are sampled by the
tiny random model. Scheduling is checked on recorded times and order, never on total wall time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from tests.support.agent_batches import agent_cfg, chat_prompt, encode, gen_batch, segments, unpadded
from tests.support.scripted_engine import Row, ScriptedEngine
from turnrl.agent.executor import ToolCall, ToolExecutor
from turnrl.agent.rollout import AgentRollout
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine

SLEEP_TOOL = """
import asyncio, time

class Sleep:
    name = "sleep"
    description = "Sleeps for the given seconds."
    parameters = {"type": "object", "properties": {"seconds": {"type": "string"}}, "required": ["seconds"]}
    obs_tag = "slept"

    def __init__(self):
        self.log = []  # (seconds, start, end) of every call

    async def call(self, arguments):
        seconds = float(arguments["seconds"])
        start = time.perf_counter()
        await asyncio.sleep(seconds)
        self.log.append((seconds, start, time.perf_counter()))
        return f"slept {seconds:g} s"
"""

TEXTS = ["Sleep long.", "Sleep a bit.", "Sleep again.", "Sleep more."]


def sleep_cfg(tmp_path, **extra):
    tool = tmp_path / "sleep_tool.py"
    tool.write_text(SLEEP_TOOL)
    return agent_cfg(
        tmp_path,
        **{
            "rollout.multi_turn.tools": "[]",
            "rollout.multi_turn.custom_tools": f"['{tool}:Sleep']",
            # the scripted actions (7-9 tokens) fit; the model's own turns stay short
            "rollout.multi_turn.max_tokens_per_turn": 10,
            **extra,
        },
    )


def scripted(tok, texts: list[str], turns: Callable[[int, int], str | None]) -> Callable:
    """A script playing `turns(prompt_index, turn)` (None: the model samples); `turn` counts the calls
    for that prompt, so it is the episode's turn when each prompt has one episode (n=1)."""
    prompts = [chat_prompt(tok, t) for t in texts]
    calls: dict[int, int] = defaultdict(int)

    def script(context: list[int]) -> list[int] | None:
        i = next(k for k, p in enumerate(prompts) if context[: len(p)] == p)
        turn = calls[i]
        calls[i] += 1
        text = turns(i, turn)
        return None if text is None else encode(tok, text)

    return script


def by_episode(tok, texts: list[str], rows: list[Row]) -> dict[int, list[Row]]:
    """The engine's rows of each prompt, in call order (with one episode per prompt: its turns)."""
    prompts = [chat_prompt(tok, t) for t in texts]
    out: dict[int, list[Row]] = defaultdict(list)
    for r in rows:
        out[next(k for k, p in enumerate(prompts) if r.context[: len(p)] == p)].append(r)
    return out


@pytest.mark.parametrize("streaming", [False, True], ids=["turn-locked", "streaming"])
def test_a_slow_tool_call_holds_back_only_its_episode(tiny, tmp_path, streaming):
    model, tok = tiny
    # episode 0's first call sleeps 1.5 s, every other call 0 s; two tool turns, then the model's final turn
    slow = "<sleep>1.5</sleep>"
    script = scripted(
        tok, TEXTS, lambda i, t: (slow if (i, t) == (0, 0) else "<sleep>0</sleep>") if t < 2 else None
    )
    engine = ScriptedEngine(script, inner=HFEngine(model, tok))
    with AgentRollout(engine, tok, sleep_cfg(tmp_path), tok.pad_token_id, streaming=streaming) as agent:
        batch, metrics = agent.generate(gen_batch(tok, TEXTS), SamplingParams(max_new_tokens=64, n=1, seed=0))
        log = agent.tools["sleep"].log
    assert len(log) == 8 and metrics["agent/turns/mean"] == 3.0
    slow_end = next(end for seconds, _, end in log if seconds == 1.5)
    turns = by_episode(tok, TEXTS, engine.rows)
    assert [len(turns[i]) for i in range(4)] == [3, 3, 3, 3]
    if streaming:
        # the fast episodes generated every later turn, final one included, while the slow call was out
        assert all(turns[i][-1].end < slow_end for i in (1, 2, 3))
        assert turns[0][1].start >= slow_end
        assert engine.max_in_flight == 1  # an in-process engine: one call at a time, tools overlap
    else:
        # one engine call per turn for the whole batch: every second turn waited for the slow call
        assert all(turns[i][1].start >= slow_end for i in range(4))
    assert len(batch) == 4


def test_streaming_keeps_input_order_and_per_turn_versions(tiny, tmp_path):
    _, tok = tiny
    texts = TEXTS[:3]
    prompts = [chat_prompt(tok, t) for t in texts]
    # both episodes of prompt 0 call a 0.6 s tool, the others 0 s: prompt 0's episodes finish last

    def turns(i: int, context_len: int) -> str:
        if context_len == len(prompts[i]):
            return f"<sleep>{0.6 if i == 0 else 0}</sleep>"
        return "<answer>done</answer>"

    def script(context: list[int]) -> list[int]:
        i = next(k for k, p in enumerate(prompts) if context[: len(p)] == p)
        return encode(tok, turns(i, len(context)))

    # the policy version goes up by one after every engine call: weights updated while episodes run
    engine = ScriptedEngine(script, eos_ids={tok.eos_token_id}, bump_version=True)
    with AgentRollout(engine, tok, sleep_cfg(tmp_path), tok.pad_token_id, streaming=True) as agent:
        batch, _ = agent.generate(gen_batch(tok, texts), SamplingParams(max_new_tokens=64, n=2, seed=0))

    finished = sorted(engine.rows, key=lambda r: r.end)
    assert all(r.context[: len(prompts[0])] == prompts[0] for r in finished[-2:])  # prompt 0 ended last
    # ... yet rows come back A,A,B,B,C,C
    g = gen_batch(tok, texts)
    for row in range(6):
        assert batch["prompts"][row].tolist() == g["input_ids"][row // 2].tolist()
        text = tok.decode(batch["responses"][row][batch["attention_mask"][row, -64:].bool()])
        assert ("slept 0.6 s" in text) == (row < 2), text

    versions = batch["rollout_token_versions"]
    seen = []
    for row in range(6):
        full, mask, _ = unpadded(batch, row)
        prompt_len = len(full) - len(mask)
        at, turn_versions = 0, []
        for kind, ids in segments(batch, row):
            vs = set(versions[row, at : at + len(ids)].tolist())
            if kind == 1:  # a model turn: the version of the engine call that sampled it
                assert len(vs) == 1, vs
                turn_versions.append(vs.pop())
                seen.append((tuple(full[: prompt_len + at]), tuple(ids), turn_versions[-1]))
            else:  # observation tokens carry the turn before's version
                assert vs == {turn_versions[-1]}
            at += len(ids)
        assert len(turn_versions) == 2 and turn_versions[1] > turn_versions[0]
        assert batch["rollout_policy_version"][row].item() == turn_versions[0]  # its oldest token
    assert sorted(seen) == sorted((tuple(r.context), tuple(r.ids), r.version) for r in engine.rows)
    assert sorted(v for *_, v in seen) == list(range(12))  # 12 calls, each its own version


@pytest.mark.parametrize("concurrent", [False, True], ids=["serialised", "concurrent"])
def test_engine_calls_overlap_only_when_the_engine_says_so(tiny, tmp_path, concurrent):
    _, tok = tiny
    texts = [f"Question {k}." for k in range(6)]
    script = scripted(tok, texts, lambda i, t: "<sleep>0</sleep>" if t == 0 else "<answer>1</answer>")
    engine = ScriptedEngine(script, eos_ids={tok.eos_token_id}, concurrent=concurrent, delay=0.1)
    with AgentRollout(
        engine, tok, sleep_cfg(tmp_path), tok.pad_token_id, streaming=True, max_episodes_in_flight=3
    ) as agent:
        batch, metrics = agent.generate(gen_batch(tok, texts), SamplingParams(max_new_tokens=64, n=1))
    assert len(batch) == 6 and metrics["agent/answered_ratio"] == 1.0
    if concurrent:
        assert 2 <= engine.max_in_flight <= 3  # at most max_episodes_in_flight episodes at once
    else:
        assert engine.max_in_flight == 1  # an in-process engine is called by one episode at a time


def test_streaming_is_reproducible_and_samples_of_a_prompt_differ(tiny, tmp_path):
    """Each episode samples with its own seed: the n samples of a prompt differ (GRPO needs them to), and
    a seeded step gives the same batch whatever order the episodes were scheduled in."""
    model, tok = tiny
    cfg = agent_cfg(tmp_path, **{"rollout.multi_turn.max_tokens_per_turn": 6})
    params = SamplingParams(max_new_tokens=24, n=3, seed=7)
    batches = []
    for in_flight in (1, 4):
        with AgentRollout(
            HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=True, max_episodes_in_flight=in_flight
        ) as agent:
            batches.append(agent.generate(gen_batch(tok, ["Compute 12 * 34.", "Hi."]), params)[0])
    a, b = batches
    assert a["responses"].tolist() == b["responses"].tolist()
    assert a["rollout_log_probs"].tolist() == b["rollout_log_probs"].tolist()
    assert a["response_mask"].tolist() == b["response_mask"].tolist()
    for g in range(2):
        # one seed for the whole group would make its three samples one; the tiny model puts most of
        # its mass on "\n", so two 6-token samples of distinct seeds may still coincide
        rows = {tuple(a["responses"][3 * g + k].tolist()) for k in range(3)}
        assert len(rows) >= 2


def test_a_failing_episode_fails_the_rollout_and_stops_the_others(tiny, tmp_path):
    _, tok = tiny

    def turns(i: int, t: int) -> str:
        if (i, t) == (1, 1):
            raise RuntimeError("engine lost episode 1")
        return f"<sleep>{1.5 if i == 0 else 0}</sleep>" if t == 0 else "<answer>1</answer>"

    engine = ScriptedEngine(scripted(tok, TEXTS[:2], turns), eos_ids={tok.eos_token_id})
    with AgentRollout(engine, tok, sleep_cfg(tmp_path), tok.pad_token_id, streaming=True) as agent:
        with pytest.raises(RuntimeError, match="engine lost episode 1"):
            agent.generate(gen_batch(tok, TEXTS[:2]), SamplingParams(max_new_tokens=64, n=1))
        # episode 0 was in its 1.5 s tool call: it stopped there instead of taking its next turn
        assert len(by_episode(tok, TEXTS[:2], engine.rows)[0]) == 1


class Echo:
    name, description, parameters = "echo", "echo", {"type": "object"}

    def __init__(self):
        self.active = self.peak = 0

    async def call(self, arguments):
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(float(arguments["seconds"]))
        finally:
            self.active -= 1
        return arguments["text"]


def test_executor_serves_several_threads_at_once():
    """Streaming episodes share one ToolExecutor: each thread gets its own outcomes, in its call order,
    with the timeout per call and `max_concurrent` bounding the calls of all threads together."""
    echo = Echo()
    executor = ToolExecutor({"echo": echo}, timeout=0.5, max_concurrent=4)
    results: dict[int, list] = {}

    def episode(k: int) -> None:
        late = "5" if k == 0 else "0.05"
        calls = [
            ToolCall("echo", {"seconds": "0.05", "text": f"{k}a"}),
            ToolCall("echo", {"seconds": late, "text": f"{k}b"}),
        ]
        results[k] = executor.run(calls)

    try:
        threads = [threading.Thread(target=episode, args=(k,)) for k in range(8)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        elapsed = time.perf_counter() - start
    finally:
        executor.close()
    assert sorted(results) == list(range(8))
    for k in range(8):
        first, second = results[k]
        assert first.text == f"{k}a" and not first.error
        if k == 0:
            assert second.error and "timed out after 0.5 s" in second.text
        else:
            assert second.text == f"{k}b" and not second.error
    assert 2 <= echo.peak <= 4
    assert elapsed < 30
