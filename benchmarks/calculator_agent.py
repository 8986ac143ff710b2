"""The calculator agent over several seeds, beside its baselines: is the gain a skill or a habit?

    python benchmarks/calculator_agent.py --seeds 3 --threads 1          # embedded SmolLM2-135M
    python benchmarks/calculator_agent.py --model tiny-random --tiny     # smoke run (~1 min)
    python benchmarks/calculator_agent.py --agent anthropic --seeds 3 --threads 1
    python benchmarks/calculator_agent.py --agent node --seeds 3 --threads 1

`--agent` picks one of three writings of the same agent (same prompts, tool and reward), each
trained as it is:

    openai     examples/agents/calculator_openai.py, the `openai` SDK's chat completions, as a
               function (`rollout.agent.entrypoint=...:run`; the default)
    anthropic  src/turnrl/recipes/agents/calculator_anthropic.py, the `anthropic` SDK's Messages API,
               as a process (`rollout.agent.command="python ..."`)
    node       src/turnrl/recipes/agents/calculator_node.mjs, Node.js and the `openai` npm package on
               the Responses API, as a process (`rollout.agent.command="node ..."`); the benchmark
               copies it to `<out>/node/` and runs `npm install --prefix <out>/node openai` first
               (without node and npm on PATH it says so and stops, measuring nothing)

Each seed is one real `turnrl train calculator_agent` run in a child process (the command of
docs/agent-programs.md, `trainer.seed` = the seed), validated greedy on the calculator task's 64 held-out
products after its last step; seed 1 also validates before training (the untrained model: greedy
is seed-free, so once). Reported apart, per condition:

    acc            the answer's last number is the product (the skill)
    format         the answer is one number alone, as the system prompt asks (an echoed
                   expression holds numbers and is not formatted)
    called right   a calculator call returned the product
    calls          calculator calls per episode

and, over every training episode, the model calls the gateway served and those it trained on
(`agent/calls/mean` less `agent/untrained_calls/mean` and `agent/abandoned_calls/mean`), with the
template forks: an agent whose history drifts from what the model wrote shows it there.

Baselines on the same 64 rows, scored by the agent's own `score`: the scripted policy (the tool
called with the question's two numbers, its result answered: the ceiling of the protocol), the
echoed expression (no call, the question's expression as the answer) and the best constant answer
(the most frequent product); the three agents share this `score` (calculator_node.mjs's own copy is
tested to agree). A gain counts above the best shortcut (echo, constant); the scripted row
shows what is left to learn. Written to `<out>/calculator_agent.json`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _cli import cli, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "agents" / "calculator_openai.py"
AGENTS = ROOT / "src" / "turnrl" / "recipes" / "agents"
LABELS = {
    "openai": "OpenAI SDK, chat completions",
    "anthropic": "Anthropic SDK, Messages API",
    "node": "Node.js openai package, Responses API",
}
TEMPLATE = ROOT / "examples" / "templates" / "chatml_tools.jinja"
COLUMNS = {
    "acc": "accuracy",
    "format": "format_rate",
    "called right": "called_right/mean",
    "calls": "calls/mean",
}
"""Table column -> the key under `val/` of a run's validation metrics."""
TINY = {"seeds": 1, "steps": 1, "n_val": 4, "batch": 2, "n": 2}
CALLS = (
    "agent/calls/mean",
    "agent/untrained_calls/mean",
    "agent/abandoned_calls/mean",
    "agent/template_forks",
)
"""A training step's metrics that say how many of the agent's model calls were trained on."""


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


def node_agent(out: Path) -> tuple[Path, str]:
    """calculator_node.mjs in `out`, with the `openai` npm package installed beside it (Node finds a
    package in a node_modules folder above the script); returns the script and the package's version."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        print(f"--agent node: skipped, {' and '.join(missing)} not on PATH (install Node.js 18 or later)")
        sys.exit(0)
    out.mkdir(parents=True)
    script = out / "calculator_node.mjs"
    shutil.copyfile(AGENTS / "calculator_node.mjs", script)
    cmd = ["npm", "install", "--prefix", str(out), "--no-audit", "--no-fund", "openai"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"--agent node: {shlex.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    version = json.loads((out / "node_modules" / "openai" / "package.json").read_text())["version"]
    return script, version


def agent_args(agent: str, node_script: Path | None) -> list[str]:
    """The overrides that name the agent: a function for openai, a process for the other two."""
    if agent == "openai":
        return [f"rollout.agent.entrypoint={AGENT}:run"]
    if agent == "anthropic":
        command = shlex.join([sys.executable, str(AGENTS / "calculator_anthropic.py")])
    else:
        assert node_script is not None
        command = shlex.join(["node", str(node_script)])
    return [f"rollout.agent.command={command}"]


def call_counts(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Model calls per training episode, over `steps` (each step the same number of episodes)."""
    mean = {key: statistics.fmean(s[key] for s in steps) for key in CALLS}
    made = mean["agent/calls/mean"]
    trained = made - mean["agent/untrained_calls/mean"] - mean["agent/abandoned_calls/mean"]
    return {"made": made, "trained": trained, "forks": mean["agent/template_forks"]}


def train(
    a: argparse.Namespace, seed: int, run: Path, agent: list[str]
) -> tuple[float, list[dict[str, Any]], list[dict[str, Any]]]:
    """One seed's run: its wall seconds, validation rows and training-step rows."""
    args = [
        "train", "calculator_agent", f"model.path={a.model}", "rollout.multi_turn.enable=false",
        *agent, f"rollout.agent.chat_template={TEMPLATE}",
        "data.max_prompt_length=640", "data.max_response_length=160",
        f"data.task_args.n_val={a.n_val}", f"data.train_batch_size={a.batch}", f"rollout.n={a.n}",
        f"actor.ppo_mini_batch_size={min(4, a.batch)}",
        f"trainer.total_training_steps={a.steps}", f"trainer.test_freq={a.steps}",
        f"trainer.val_before_train={str(seed == 1).lower()}", "trainer.save_freq=0",
        f"trainer.seed={seed}", f"trainer.num_threads={a.threads}", "trainer.logger=[jsonl]",
        # a time limit that only a stuck episode meets: validation on a busy 2-core machine runs
        # 64 greedy episodes through one engine, and 300 s (the default) cut some of them short
        "rollout.agent.timeout_s=900",
        f"trainer.default_local_dir={run}",
    ]  # fmt: skip
    wall = cli(args, run.with_suffix(".log"))
    rows = read_jsonl(run / "metrics.jsonl")
    return wall, [r for r in rows if "val/test_score/mean" in r], [r for r in rows if "agent/calls/mean" in r]


def cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument(
        "--agent", choices=list(LABELS), default="openai", help="which writing of the agent (default openai)"
    )
    ap.add_argument("--out", default="", help="output directory (default runs/calculator_agent-<time>)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    ap.add_argument("--first-seed", type=int, default=1, help="start at this seed (to add seeds to a run)")
    ap.add_argument("--steps", type=int, default=4, help="RL steps per seed")
    ap.add_argument("--batch", type=int, default=8, help="prompts per step")
    ap.add_argument("--n", type=int, default=8, help="episodes per prompt")
    ap.add_argument("--n-val", type=int, default=64, help="held-out products")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0 = torch's default)")
    ap.add_argument("--tiny", action="store_true", help="smoke-run sizes, with --model tiny-random")
    a = ap.parse_args()
    if a.tiny:
        vars(a).update(TINY)
    stem = "calculator_agent" + ("" if a.agent == "openai" else f"_{a.agent}")
    out = Path(a.out or f"runs/{stem}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"--out {out} is not empty")
    node_script, node_openai = node_agent(out / "node") if a.agent == "node" else (None, "")
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model {a.model}; "
        f"agent {a.agent}" + (f" (openai npm {node_openai})" if node_openai else "") + f"; out {out}"
    )
    agent = agent_args(a.agent, node_script)
    rows: dict[str, list[dict[str, float]]] = {k: [v] for k, v in baselines(a.n_val).items()}
    walls, calls = [], []
    for seed in range(a.first_seed, a.seeds + 1):
        wall, vals, steps = train(a, seed, out / f"seed{seed}", agent)
        walls.append(wall)
        calls.append(call_counts(steps))
        if seed == 1:
            rows["untrained (greedy, once)"] = [{c: vals[0][f"val/{k}"] for c, k in COLUMNS.items()}]
        rows.setdefault(f"after {a.steps} RL steps", []).append(
            {c: vals[-1][f"val/{k}"] for c, k in COLUMNS.items()}
        )
        print(
            f"  seed {seed}: {rows[f'after {a.steps} RL steps'][-1]}, calls {calls[-1]}, wall {wall:.0f} s",
            flush=True,
        )
    print(
        f"\ncalculator agent ({LABELS[a.agent]}): {a.model}; {a.seeds} seeds x {a.steps} steps of {a.batch} x {a.n}"
    )
    print(f"{'condition':<52}" + "".join(f"{c:>22}" for c in COLUMNS))
    for name, runs in rows.items():
        print(f"{name:<52}" + "".join(f"{cell([r[c] for r in runs]):>22}" for c in COLUMNS))
    print(
        f"greedy, {a.n_val} held-out products; mean (min-max) over seeds; wall per seed {[round(w) for w in walls]} s"
    )
    print(
        "model calls per training episode: made "
        + cell([c["made"] for c in calls])
        + ", trained "
        + cell([c["trained"] for c in calls])
        + "; template forks per step "
        + cell([c["forks"] for c in calls])
    )
    settings = {**vars(a), "openai_npm": node_openai} if node_openai else vars(a)
    (out / "calculator_agent.json").write_text(
        json.dumps({"settings": settings, "results": rows, "calls": calls, "wall_s": walls}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
