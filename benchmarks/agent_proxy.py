"""The plain-function agent path (an OpenAI-SDK agent through the recording gateway) against the
built-in agent loop, on the same engine and calculator questions: episodes/s, model calls/s, and
the per-call overhead, i.e. the time the engine sat idle per call.

    python benchmarks/agent_proxy.py --model tiny-random --episodes 64
    python benchmarks/agent_proxy.py --model smollm2-135m-instruct --episodes 16 --concurrency 1 8

The function path runs its episodes at concurrency 1, 8 and 64 (`rollout.agent.max_concurrency`); the
built-in loop runs them turn-locked (the synchronous trainer's schedule: every episode's next turn
in one engine call) and streamed at the same concurrencies (`max_episodes_in_flight`, async RL's). The engine is timed around every
`generate`, so `overhead ms/call = (wall - engine busy) / calls`: what the path costs beyond
sampling (HTTP, JSON, the SDK, chat-template rendering, recording). The function agent makes a
fixed number of calls per episode (`benchmarks/_fixed_calls_agent.py`); the loop's episodes end when
the model stops calling tools, so compare calls/s and overhead, not episodes/s, across paths.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch

from turnrl.agent.functions.rollout import FunctionAgentRollout
from turnrl.agent.rollout import AgentRollout
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tensors import left_pad, position_ids_from_mask

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parent / "examples" / "templates" / "chatml_tools.jinja"
QUESTIONS = [f"Compute {a} * {b}." for a, b in [(12, 34), (417, 29), (88, 905), (7, 63)]]


class TimedEngine(HFEngine):
    """The real engine; every `generate` is timed (busy seconds) and its rows counted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.busy, self.calls, self.rows, self.tokens = 0.0, 0, 0, 0
        self.lock = threading.Lock()

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None, abort=None):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        out = super().generate(prompt_ids, params, max_new_tokens_per_row, abort=abort)
        with self.lock:
            self.busy += time.perf_counter() - start
            self.calls += 1
            self.rows += len(out.response_ids)
            self.tokens += sum(len(r) for r in out.response_ids)
        return out


def rows_batch(tok: Any, episodes: int) -> Batch:
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(episodes)]
    prompts = [
        tok.encode(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )
        for q in questions
    ]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [[{"role": "user", "content": q}] for q in questions],
            "data_source": ["turnrl/calculator"] * episodes,
            "ground_truth": ["0"] * episodes,
            "extra_info": [{} for _ in questions],
            "index": list(range(episodes)),
        },
    )


def timed(path: str, rollout: Any, engine: TimedEngine, batch: Batch, budget: int) -> dict[str, float]:
    engine.busy, engine.calls, engine.rows, engine.tokens = 0.0, 0, 0, 0
    start = time.perf_counter()
    _, metrics = rollout.generate(batch, SamplingParams(max_new_tokens=budget, n=1, temperature=1.0))
    wall = time.perf_counter() - start
    calls = (
        metrics.get("agent/calls/mean", 0.0) * len(batch)
        if path == "function"
        else metrics.get("agent/turns/mean", 0.0) * len(batch)
    )
    return {
        "wall_s": round(wall, 2),
        "episodes_per_s": round(len(batch) / wall, 2),
        "calls": round(calls),
        "calls_per_s": round(calls / wall, 2),
        "engine_busy_s": round(engine.busy, 2),
        "engine_calls": engine.calls,
        "tokens_sampled": engine.tokens,
        "overhead_ms_per_call": round(1000 * (wall - engine.busy) / max(calls, 1), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--calls", type=int, default=3, help="calls per function-agent episode")
    ap.add_argument("--tokens", type=int, default=16, help="max tokens per call")
    ap.add_argument(
        "--paths", nargs="+", default=["function", "loop-locked", "loop-streamed"],
        help="function: the OpenAI-SDK agent via the gateway; loop-locked: the built-in loop's "
        "turn-locked schedule (all episodes' turns in one engine call); loop-streamed: its streamed one",
    )  # fmt: skip
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--out", default="", help="write the results as JSON here too")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    os.environ["AGENT_PROXY_CALLS"], os.environ["AGENT_PROXY_TOKENS"] = str(a.calls), str(a.tokens)
    torch.manual_seed(0)
    model, tok = load_model(a.model, torch.device("cpu"), "float32", "", 0)
    model.eval()
    engine = TimedEngine(model, tok, batch_size=64)
    budget = a.calls * (a.tokens + 64)  # room for the calls and the messages between them
    batch = rows_batch(tok, a.episodes)
    results: list[dict[str, Any]] = []

    def record(path: str, c: int, rollout: Any) -> None:
        results.append({"path": path, "concurrency": c, **timed(path, rollout, engine, batch, budget)})
        print(json.dumps(results[-1]), flush=True)

    loop_cfg = load_config(None, [
        "rollout.multi_turn.enable=true", "rollout.multi_turn.tools=[calculator]",
        f"rollout.multi_turn.max_tokens_per_turn={a.tokens}", f"data.max_response_length={budget}",
    ])  # fmt: skip
    if "loop-locked" in a.paths:  # the synchronous trainer's schedule: every episode's turn in one call
        locked = AgentRollout(engine, tok, loop_cfg, tok.pad_token_id, streaming=False)
        try:
            record("loop-locked", a.episodes, locked)
        finally:
            locked.close()
    for c in a.concurrency:
        if "function" in a.paths:
            fn_cfg = load_config(None, [
                f"rollout.agent.entrypoint={HERE / '_fixed_calls_agent.py'}:run",
                f"rollout.agent.chat_template={TEMPLATE}", f"rollout.agent.max_concurrency={c}",
                f"data.max_response_length={budget}", "data.max_prompt_length=512",
            ])  # fmt: skip
            with FunctionAgentRollout(engine, tok, fn_cfg, tok.pad_token_id) as rollout:
                record("function", c, rollout)
        if "loop-streamed" in a.paths:
            loop = AgentRollout(
                engine, tok, loop_cfg, tok.pad_token_id, streaming=True, max_episodes_in_flight=c
            )
            try:
                record("loop-streamed", c, loop)
            finally:
                loop.close()
    print(f"\n{a.model}, {a.episodes} episodes, {a.calls} calls x {a.tokens} tokens per function episode")
    print("| path | concurrency | episodes/s | calls/s | overhead ms/call | engine busy s | wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['path']} | {r['concurrency']} | {r['episodes_per_s']} | {r['calls_per_s']} | "
            f"{r['overhead_ms_per_call']} | {r['engine_busy_s']} | {r['wall_s']} |"
        )
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
