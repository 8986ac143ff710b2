"""Faulty tools at 0 / 10 / 30 %: does the agent loop keep going, and does it count every fault?

    python benchmarks/fault_soak.py [--episodes 1000] [--rates 0,0.1,0.3] [--timeout 0.5] [--batch 250]

Each rate runs N calculator-agent episodes through the real rollout path (`AgentRollout` built from
`examples/calculator_agent.yaml`, episode loop, executor, observation builder, metrics) with
`tests/support/faulty_tools.py:FaultyCalculator` registered as a custom tool; the policy is the scripted
engine of `tests/support/scripted_engine.py` (tiny-random's tokenizer), which calls the calculator once per
episode and then answers, so the time measured is the loop's and the tools', not a model's.

Printed side by side: episodes/s, crashes (must be 0), and per fault kind what the tool injected
against what the loop counted in `agent/tool_errors/<kind>` (must be equal). A timed-out call costs
its turn `--timeout` seconds, which bounds episodes/s from below at any rate above 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the faulty tool and the scripted engine live with the tests
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.support.fault_episodes import SoakReport, accounting_problems, soak  # noqa: E402
from tests.support.faulty_tools import ERROR_KIND, FAULT_KINDS  # noqa: E402

from turnrl.models.loader import load_tokenizer  # noqa: E402


def row(rate: float, r: SoakReport) -> str:
    kinds = "  ".join(f"{r.injected[k]:>4d}/{r.counted[ERROR_KIND[k]]:<4d}" for k in FAULT_KINDS)
    other = sum(r.counted.values()) - sum(r.counted[ERROR_KIND[k]] for k in FAULT_KINDS)
    ok = "yes" if not accounting_problems(r) and other == 0 else "NO"
    return (
        f"{rate:>5.0%}  {r.episodes:>8d}  {r.seconds:>7.2f}  {r.episodes / r.seconds:>10.1f}  {r.crashes:>7d}  "
        f"{sum(r.injected.values()):>8d}  {kinds}  {other:>5d}  {ok:>5s}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--rates", default="0,0.1,0.3", help="comma-separated fault rates")
    p.add_argument("--timeout", type=float, default=0.5, help="rollout.multi_turn.tool_timeout, seconds")
    p.add_argument("--batch", type=int, default=250, help="episodes per AgentRollout.generate call")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--streaming", action="store_true", help="the streaming (async RL) schedule")
    args = p.parse_args()
    tok = load_tokenizer("tiny-random")
    rates = [float(x) for x in args.rates.split(",")]
    print(
        f"{args.episodes} calculator episodes per rate, tool_timeout {args.timeout:g} s, {args.batch} per batch, "
        f"{'streaming' if args.streaming else 'turn-locked'}; faults: injected/counted"
    )
    header = "  ".join(f"{k:>9s}" for k in FAULT_KINDS)
    print(
        f"{'rate':>5s}  {'episodes':>8s}  {'wall s':>7s}  {'episodes/s':>10s}  {'crashes':>7s}  {'injected':>8s}  {header}  {'other':>5s}  {'exact':>5s}"
    )
    failed = False
    with tempfile.TemporaryDirectory(prefix="turnrl-fault-soak-") as cache:
        for rate in rates:
            report = soak(
                tok, Path(cache), args.episodes, rate, seed=args.seed, tool_timeout=args.timeout,
                batch_size=args.batch, streaming=args.streaming,
            )  # fmt: skip
            print(row(rate, report), flush=True)
            failed |= bool(report.crashes or accounting_problems(report))
    print("kinds counted as: " + ", ".join(f"{k} -> agent/tool_errors/{v}" for k, v in ERROR_KIND.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
