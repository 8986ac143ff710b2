"""Do slow tools stall agent rollouts? A 200 ms tool against an instant one, 32 episodes x 3 tool turns.

    python benchmarks/agent_tools.py [--episodes 32] [--delay 0.2] [--no-serial]

The policy is the tiny random model taught (a few seconds of Adam) to call the calculator three
times and then answer, so every episode really makes 3 tool calls through the real episode loop,
engine and executor. Rows:

- instant tool: generation and loop overhead only;
- 200 ms tool, concurrent (the default executor): a turn's calls wait together, so the slow tool
  should add about turns x delay (3 x 0.2 s = 0.6 s), not episodes x turns x delay;
- 200 ms tool, one call at a time (`max_concurrent_calls=1`): the serial waits a naive loop pays
  (32 x 3 x 0.2 s = 19.2 s), for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import torch

from turnrl.agent.executor import ToolExecutor
from turnrl.agent.loop import EpisodeLoop
from turnrl.agent.tools.base import ToolResult, text_parameter
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine

TURNS = 3
BUDGET = 96


class SleepyCalculator:
    name = "calculator"
    description = "answers after a fixed delay"
    parameters = text_parameter("expression", "anything")
    tag, obs_tag = "calculator", "result"

    def __init__(self, delay: float):
        self.delay = delay

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        return ToolResult("408")


def taught_model() -> tuple[Any, Any, list[int]]:
    torch.manual_seed(0)
    model, tok = load_model("tiny-random", torch.device("cpu"), seed=0)

    def enc(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    chat = [{"role": "user", "content": "Compute 12 * 34."}]
    prompt = enc(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
    turn = enc("<calculator>12 * 34</calculator>") + enc("\n\n<result>") + enc("408") + enc("</result>\n\n")
    target = turn * TURNS + enc("<answer>408</answer>") + [tok.eos_token_id]
    x = torch.tensor([prompt + target])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(100):
        logits = model(input_ids=x[:, :-1]).logits[0, len(prompt) - 1 :]
        loss = torch.nn.functional.cross_entropy(logits, x[0, len(prompt) :])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model, tok, prompt


def rollout_time(
    engine: HFEngine, tok: Any, prompt: list[int], episodes: int, delay: float, concurrent: int
) -> tuple[float, float]:
    cfg = MultiTurnConfig(enable=True, max_turns=TURNS, tools=["calculator"], max_concurrent_calls=concurrent)
    tools = {"calculator": SleepyCalculator(delay)}
    executor = ToolExecutor(tools, timeout=30, max_concurrent=concurrent)
    try:
        loop = EpisodeLoop(engine, tok, cfg, tools, executor, engine.eos)
        params = SamplingParams(max_new_tokens=BUDGET, n=episodes, temperature=1.0, seed=0)
        start = time.perf_counter()
        eps = loop.run([prompt], episodes, params, BUDGET)
        wall = time.perf_counter() - start
    finally:
        executor.close()
    return wall, statistics.mean(e.tool_calls for e in eps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--no-serial", action="store_true", help="skip the one-call-at-a-time row")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok, prompt = taught_model()
    engine = HFEngine(model, tok, batch_size=64)
    rollout_time(engine, tok, prompt, 4, 0.0, 64)  # warm-up
    rows = [("instant tool", 0.0, 64), (f"{args.delay * 1000:.0f} ms tool, concurrent", args.delay, 64)]
    if not args.no_serial:
        rows.append((f"{args.delay * 1000:.0f} ms tool, one call at a time", args.delay, 1))
    results = []
    print(f"{args.episodes} episodes, up to {TURNS} tool turns each (tiny model taught to call the tool)")
    print(f"{'setting':40s} {'wall s':>8s} {'calls/episode':>14s} {'ratio':>7s}")
    for name, delay, conc in rows:
        wall, calls = rollout_time(engine, tok, prompt, args.episodes, delay, conc)
        results.append(wall)
        print(f"{name:40s} {wall:8.2f} {calls:14.2f} {wall / results[0]:7.2f}")
    extra = results[1] - results[0]
    print(
        f"slow tool adds {extra:.2f} s: about {TURNS} x {args.delay:g} s = {TURNS * args.delay:.2f} s if calls overlap, "
        f"{args.episodes * TURNS * args.delay:.1f} s if they wait one by one"
    )


if __name__ == "__main__":
    main()
