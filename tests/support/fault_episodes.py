"""Calculator-agent episodes against the fault-injecting calculator, through the real rollout path.

Shared by `tests/integration/test_agent_faults.py` and `benchmarks/fault_soak.py`. The policy is
`ScriptedEngine` (the real engine contract, chosen token ids): turn 1 calls the calculator on the
prompt's numbers, turn 2 answers. Everything after the engine is real: `AgentRollout` built from the
calculator recipe with `tests/support/faulty_tools.py:FaultyCalculator` registered as a custom tool, the
episode loop, the executor, the observation builder, `assemble_episodes` and `agent_metrics`.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.faulty_tools import ERROR_KIND, FaultyCalculator
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.executor import ERROR_KINDS
from turnrl.agent.rollout import AgentRollout
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.config.schema import Config
from turnrl.rollout.base import SamplingParams
from turnrl.tensors import left_pad, position_ids_from_mask

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "calculator_agent.yaml"
FAULTY = ROOT / "tests" / "support" / "faulty_tools.py"
BUDGET = 128  # room for the call, a full observation and the answer: every fault must be seen


def problems(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """`n` distinct multiplications of 3-4 digit numbers (distinct: each expression is called once)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    while len(seen) < n:
        seen.add((rng.randrange(100, 10_000), rng.randrange(100, 10_000)))
    return sorted(seen, key=lambda p: rng.random())


def expression(problem: tuple[int, int]) -> str:
    return f"{problem[0]} * {problem[1]}"


class CalculatorScript:
    """The scripted model's turns, by prompt: `<calculator>a * b</calculator>`, then the answer and EOS."""

    def __init__(self, tok: Any, batch: list[tuple[int, int]]):
        def enc(text: str) -> list[int]:
            return list(tok(text, add_special_tokens=False)["input_ids"])

        self.prompts = [enc(f"Compute {expression(p)}.") for p in batch]
        self.turns = {
            tuple(prompt): (
                enc(f"<calculator>{expression(p)}</calculator>"),
                [*enc(f"<answer>{p[0] * p[1]}</answer>"), tok.eos_token_id],
            )
            for prompt, p in zip(self.prompts, batch, strict=True)
        }
        self.lengths = sorted({len(p) for p in self.prompts})

    def __call__(self, context: list[int]) -> list[int]:
        for n in self.lengths:
            turns = self.turns.get(tuple(context[:n]))
            if turns is not None:
                return turns[0] if len(context) == n else turns[1]
        raise AssertionError("a context that starts with no known prompt")


def fault_config(cache_dir: Path, tool_timeout: float, tool_class: str = "FaultyCalculator") -> Config:
    overrides = {
        "model.path": "tiny-random",
        "model.cache_dir": str(cache_dir),
        "rollout.multi_turn.tools": "[]",
        "rollout.multi_turn.custom_tools": f"['{FAULTY}:{tool_class}']",
        "rollout.multi_turn.tool_timeout": tool_timeout,
    }
    return load_config(RECIPE, [f"{k}={v}" for k, v in overrides.items()])


@contextmanager
def fault_env(rate: float, seed: int, hang_s: float) -> Iterator[None]:
    """The faulty tool's settings: it is built by the custom-tool loader, without arguments."""
    values = {
        "TURNRL_FAULT_RATE": str(rate),
        "TURNRL_FAULT_SEED": str(seed),
        "TURNRL_FAULT_HANG_S": str(hang_s),
    }
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def observation_text(tok: Any, batch: Batch, row: int) -> str:
    """The decoded observation tokens (response_mask 0 inside the response) of one row."""
    r = batch["responses"].shape[1]
    real = batch["attention_mask"][row, -r:].bool()
    obs = real & (batch["response_mask"][row] == 0)
    return tok.decode(batch["responses"][row][obs].tolist(), skip_special_tokens=False)


@dataclass
class SoakReport:
    episodes: int = 0
    seconds: float = 0.0
    crashes: int = 0
    calls: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    """Faults the tool injected, by fault kind."""
    counted: Counter[str] = field(default_factory=Counter)
    """`agent/tool_errors/<kind>` summed over the batches, by error kind."""
    episode_errors: int = 0
    """Sum of the per-episode `agent_tool_errors` field."""
    rows: list[tuple[str, str]] = field(default_factory=list)
    """(expression, observation text) of every episode."""
    injections: dict[str, str] = field(default_factory=dict)
    """expression -> fault kind."""
    metrics: list[dict[str, float]] = field(default_factory=list)


def soak(
    tok: Any,
    cache_dir: Path,
    episodes: int,
    rate: float,
    seed: int = 0,
    tool_timeout: float = 0.5,
    batch_size: int = 250,
    streaming: bool = False,
    tool_class: str = "FaultyCalculator",
) -> SoakReport:
    """Run `episodes` calculator episodes, `batch_size` per `AgentRollout.generate`; a crash is counted,
    not raised, so a benchmark can report it."""
    report = SoakReport()
    work = problems(episodes, seed)
    with fault_env(rate, seed, hang_s=4 * tool_timeout):
        cfg = fault_config(cache_dir, tool_timeout, tool_class)
        start = time.perf_counter()
        try:
            _soak(tok, cfg, work, batch_size, streaming, report)
        except Exception:
            report.crashes += 1
            if os.environ.get("TURNRL_SOAK_RAISE"):
                raise
        report.seconds = time.perf_counter() - start
    return report


def _soak(
    tok: Any, cfg: Config, work: list[tuple[int, int]], batch_size: int, streaming: bool, report: SoakReport
) -> None:
    script = CalculatorScript(tok, work)
    engine = ScriptedEngine(script, eos_ids={tok.eos_token_id})
    params = SamplingParams(max_new_tokens=BUDGET, n=1, seed=0)
    with AgentRollout(engine, tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        tool: FaultyCalculator = agent.tools["calculator"]
        for at in range(0, len(work), batch_size):
            chunk = work[at : at + batch_size]
            ids, mask = left_pad(script.prompts[at : at + batch_size], tok.pad_token_id)
            gen = Batch(
                {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)}
            )
            batch, metrics = agent.generate(gen, params)
            report.metrics.append(metrics)
            report.episodes += len(chunk)
            report.episode_errors += sum(int(x) for x in batch["agent_tool_errors"])
            for kind in ERROR_KINDS:
                report.counted[kind] += int(metrics[f"agent/tool_errors/{kind}"])
            report.rows += [(expression(p), observation_text(tok, batch, i)) for i, p in enumerate(chunk)]
        report.calls = tool.calls
        report.injected = Counter(i.kind for i in tool.injected)
        report.injections = {i.expression: i.kind for i in tool.injected}


def accounting_problems(report: SoakReport) -> list[str]:
    """Where the loop's counts differ from what the tool injected (empty when they agree exactly)."""
    out = []
    expected = Counter({ERROR_KIND[k]: n for k, n in report.injected.items()})
    for kind in ERROR_KINDS:
        if report.counted[kind] != expected[kind]:
            out.append(f"agent/tool_errors/{kind}: counted {report.counted[kind]}, injected {expected[kind]}")
    total = sum(report.injected.values())
    if report.episode_errors != total:
        out.append(f"agent_tool_errors: {report.episode_errors} episodes' errors, injected {total}")
    return out
