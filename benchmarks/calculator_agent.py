"""The OpenAI-SDK calculator agent (examples/agents/calculator_openai.py) over several seeds, beside
its baselines: is the gain a skill or a habit?

    python benchmarks/calculator_agent.py --seeds 3 --threads 1          # embedded SmolLM2-135M
    python benchmarks/calculator_agent.py --model tiny-random --tiny     # smoke run (~1 min)

Each seed is one real `turnrl train calculator_agent` run in a child process (the command of
docs/agent-programs.md, `trainer.seed` = the seed), validated greedy on the calculator task's 64 held-out
products after its last step; seed 1 also validates before training (the untrained model: greedy
is seed-free, so once). Reported apart, per condition:

    acc            the answer's last number is the product (the skill)
    format         the answer is one number alone, as the system prompt asks (an echoed
                   expression holds numbers and is not formatted)
    called right   a calculator call returned the product
    calls          calculator calls per episode

Baselines on the same 64 rows, scored by the agent's own `score`: the scripted policy (the tool
called with the question's two numbers, its result answered: the ceiling of the protocol), the
echoed expression (no call, the question's expression as the answer) and the best constant answer
(the most frequent product). A gain counts above the best shortcut (echo, constant); the scripted row
shows what is left to learn. Written to `<out>/calculator_agent.json`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _cli import cli, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "agents" / "calculator_openai.py"
TEMPLATE = ROOT / "examples" / "templates" / "chatml_tools.jinja"
COLUMNS = {
    "acc": "accuracy",
    "format": "format_rate",
    "called right": "called_right/mean",
    "calls": "calls/mean",
}
"""Table column -> the key under `val/` of a run's validation metrics."""
TINY = {"seeds": 1, "steps": 1, "n_val": 4, "batch": 2, "n": 2}


def load_agent() -> Any:
    spec = importlib.util.spec_from_file_location("calculator_openai", AGENT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def baselines(n_val: int) -> dict[str, dict[str, float]]:
    """The scripted policy, the echoed expression and the best constant answer on the held-out rows."""
    from turnrl.tasks import calculator

    agent = load_agent()
    rows = [
        {**r, "ground_truth": r["reward_model"]["ground_truth"]}
        for r in calculator.rows("val", 0, n_val=n_val)
    ]
    constant = Counter(r["ground_truth"] for r in rows).most_common(1)[0][0]
    policies = {
        "scripted: tool called with the question's numbers": agent.scripted,
        "shortcut: echo the expression": agent.echo,
        "shortcut: best constant answer": lambda r: agent.score(constant, False, 0, r["ground_truth"]),
    }
    out = {}
    for name, policy in policies.items():
        scores = [policy(r) for r in rows]
        out[name] = {
            col: statistics.fmean(s[key] for s in scores)
            for col, key in {
                "acc": "acc",
                "format": "formatted",
                "called right": "called_right",
                "calls": "calls",
            }.items()
        }
    return out


def train(a: argparse.Namespace, seed: int, run: Path) -> tuple[float, list[dict[str, Any]]]:
    args = [
        "train", "calculator_agent", f"model.path={a.model}", "rollout.multi_turn.enable=false",
        f"rollout.agent.entrypoint={AGENT}:run", f"rollout.agent.chat_template={TEMPLATE}",
        "data.max_prompt_length=640", "data.max_response_length=160",
        f"data.task_args.n_val={a.n_val}", f"data.train_batch_size={a.batch}", f"rollout.n={a.n}",
        f"actor.ppo_mini_batch_size={min(4, a.batch)}",
        f"trainer.total_training_steps={a.steps}", f"trainer.test_freq={a.steps}",
        f"trainer.val_before_train={str(seed == 1).lower()}", "trainer.save_freq=0",
        f"trainer.seed={seed}", f"trainer.num_threads={a.threads}", "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={run}",
    ]  # fmt: skip
    wall = cli(args, run.with_suffix(".log"))
    return wall, [r for r in read_jsonl(run / "metrics.jsonl") if "val/test_score/mean" in r]


def cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--out", default="", help="output directory (default runs/calculator_agent-<time>)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    ap.add_argument("--steps", type=int, default=4, help="RL steps per seed")
    ap.add_argument("--batch", type=int, default=8, help="prompts per step")
    ap.add_argument("--n", type=int, default=8, help="episodes per prompt")
    ap.add_argument("--n-val", type=int, default=64, help="held-out products")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0 = torch's default)")
    ap.add_argument("--tiny", action="store_true", help="smoke-run sizes, with --model tiny-random")
    a = ap.parse_args()
    if a.tiny:
        vars(a).update(TINY)
    out = Path(a.out or f"runs/calculator_agent-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"--out {out} is not empty")
    out.mkdir(parents=True)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model {a.model}; out {out}"
    )
    rows: dict[str, list[dict[str, float]]] = {k: [v] for k, v in baselines(a.n_val).items()}
    walls = []
    for seed in range(1, a.seeds + 1):
        wall, vals = train(a, seed, out / f"seed{seed}")
        walls.append(wall)
        if seed == 1:
            rows["untrained (greedy, once)"] = [{c: vals[0][f"val/{k}"] for c, k in COLUMNS.items()}]
        rows.setdefault(f"after {a.steps} RL steps", []).append(
            {c: vals[-1][f"val/{k}"] for c, k in COLUMNS.items()}
        )
        print(f"  seed {seed}: {rows[f'after {a.steps} RL steps'][-1]}, wall {wall:.0f} s", flush=True)
    print(
        f"\ncalculator agent (OpenAI SDK): {a.model}; {a.seeds} seeds x {a.steps} steps of {a.batch} x {a.n}"
    )
    print(f"{'condition':<52}" + "".join(f"{c:>22}" for c in COLUMNS))
    for name, runs in rows.items():
        print(f"{name:<52}" + "".join(f"{cell([r[c] for r in runs]):>22}" for c in COLUMNS))
    print(
        f"greedy, {a.n_val} held-out products; mean (min-max) over seeds; wall per seed {[round(w) for w in walls]} s"
    )
    (out / "calculator_agent.json").write_text(
        json.dumps({"settings": vars(a), "results": rows, "wall_s": walls}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
