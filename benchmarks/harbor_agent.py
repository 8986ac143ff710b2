"""The coding agent on the built-in Harbor tasks: untrained, SFT on the tasks' scripted solutions, SFT
then RL, several seeds, on the 15 held-out tasks; beside the shortcut baselines, with paired 95 %
intervals. docs/results/harbor-agent.md reads its table.

    python benchmarks/harbor_agent.py --out runs/harbor_agent                 # embedded model, 3 seeds
    python benchmarks/harbor_agent.py --out runs/harbor_agent --resume        # go on where it stopped
    python benchmarks/harbor_agent.py --out runs/harbor_agent --resume --first-seed 2 --seeds 1   # seed 2 beside it
    python benchmarks/harbor_agent.py --model tiny-random --tiny --out /tmp/h  # smoke run (scores are 0)

Every stage is the real CLI in a child process, one after the other, on the shipped recipes:

    untrained    turnrl eval harbor_agent_rl model.path=MODEL eval.n=0        (once: greedy is seed-free)
    SFT          turnrl data harbor_sft, turnrl sft harbor_sft on it, turnrl eval harbor_agent_rl of <sft>/model
    SFT + RL     turnrl train harbor_agent_rl model.path=<sft>/model          (its final validation)

`--resume` reuses every stage a run in `--out` finished with the same command (an RL run stopped
midway resumes from its last checkpoint: the recipe saves every step), so the table can be built
over several sessions, one seed at a time. A task scores 1 when its hidden tests pass after the
episode. The paired intervals come from `turnrl compare` (`turnrl.evaluate.compare`): SFT against the
untrained model and SFT then RL against SFT, over tasks and seeds, on the held-out tasks of the
training families (`turnrl/harbor/new_task`) and of the family no training task shows
(`turnrl/harbor/new_family`) apart. The shortcut baselines (an empty attempt; the oracle of the
nearest training task) are `benchmarks/harbor_shortcuts.py`'s. Writes `<out>/harbor_agent.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _cli import Stages, cpu_name
from harbor_shortcuts import nearest, score

from turnrl.evaluate.compare import compare, sample_file
from turnrl.tasks.harbor.builtin import train_tasks, val_tasks

RECIPE = "harbor_agent_rl"
SORTS = ("turnrl/harbor/new_task", "turnrl/harbor/new_family")
TINY = {"seeds": 1, "steps": 1, "demos": 4, "sft_epochs": 1, "max_turns": 1, "val_tasks": 2}
"""A smoke run: every stage and file on two held-out tasks."""


def common(a: argparse.Namespace, val: Path | None, seed: int) -> list[str]:
    """What the evaluations and the RL run share: the recipe, its held-out rows, seed and threads."""
    return [
        RECIPE,
        *([f"data.val_files=[{val}]"] if val else []),
        *([f"rollout.multi_turn.max_turns={a.max_turns}"] if a.max_turns else []),
        f"trainer.seed={seed}",
        f"trainer.num_threads={a.threads}",
    ]


def evaluate(a: argparse.Namespace, stages: Stages, model: str, out: Path, val: Path | None, seed: int) -> dict[str, Any]:  # fmt: skip
    """`turnrl eval` on the held-out tasks, greedy: the pass rate overall and per sort."""
    args = ["eval", *common(a, val, seed), f"model.path={model}", "eval.n=0", "--out", str(out)]
    wall = stages.run(out.name, out / "summary.json", args, out.with_suffix(".log"))
    summary = json.loads((out / "summary.json").read_text())
    per_source = summary["metrics"]["per_data_source"]
    # a task's reward is what its tests/test.sh reported (1 when they pass): the greedy score
    return {
        "pass_rate": float(summary["metrics"]["overall"]["greedy_score"]),
        **{src: float(per_source[src]["greedy_score"]) for src in SORTS if src in per_source},
        "eval_s": float(summary["passes"]["greedy"]["seconds"]),
        "wall_s": wall,
        "samples": str(out),
    }


def rl(a: argparse.Namespace, stages: Stages, model: str, run: Path, val: Path | None, seed: int) -> dict[str, Any]:  # fmt: skip
    """One RL run, measured by its final validation (the same greedy pass `turnrl eval` makes)."""
    args = [
        "train", *common(a, val, seed), f"model.path={model}", f"trainer.total_training_steps={a.steps}",
        "trainer.logger=[jsonl]", f"trainer.default_local_dir={run}",
    ]  # fmt: skip
    wall = stages.run(run.name, run / "val_samples", args, run.with_suffix(".log"))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    final = [r for r in rows if "val/test_score/mean" in r][-1]
    return {
        "pass_rate": float(final["val/test_score/mean"]),
        **{src: float(final[f"val/test_score/{src}"]) for src in SORTS if f"val/test_score/{src}" in final},
        "eval_s": float(final.get("timing_s/validate", 0.0)),
        "wall_s": wall,
        "samples": str(run),
    }


def shortcuts(names: set[str]) -> dict[str, dict[str, float]]:
    """The two shortcut baselines on the held-out tasks named `names` (all of them when empty)."""
    pool = [t for _, t in train_tasks()]
    rows = {"empty attempt": [], "the nearest training task's oracle": []}
    for _, task in val_tasks():
        if names and task.name not in names:
            continue
        rows["empty attempt"].append(score(task, None))
        rows["the nearest training task's oracle"].append(score(task, nearest(task, pool)))
    return {name: {"pass_rate": statistics.fmean(v)} for name, v in rows.items()}


def held_out_rows(k: int, out: Path) -> Path | None:
    """The first `k` held-out rows as a file; None (the task's own 15) when `k` is 0."""
    if not k:
        return None
    from turnrl.tasks import write_task

    lines = write_task("harbor", out / "task", 0).val.read_text().splitlines(keepends=True)
    path = out / f"val_{k}.jsonl"
    path.write_text("".join(lines[:k]))
    return path


def paired(base: list[str], new: list[str]) -> dict[str, Any]:
    """`turnrl compare --base ... --new ... --field score --threshold 1`: per sort and overall."""
    result = compare([Path(b) for b in base], [Path(n) for n in new], "score", 1.0)
    return {k: {"pooled": asdict(v["pooled"]), "per_seed": [asdict(s) for s in v["per_seed"]]} for k, v in result.items()}  # fmt: skip


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model.path of the untrained model")
    ap.add_argument("--out", required=True, help="output directory (--resume goes on in it)")
    ap.add_argument("--seeds", type=int, default=3, help="how many seeds for SFT and SFT then RL")
    ap.add_argument("--first-seed", type=int, default=1, help="the first of them (a second process in the same --out can take other seeds)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=6, help="RL steps (the recipe's 6)")
    ap.add_argument("--demos", type=int, default=60, help="SFT demonstrations (`turnrl data harbor_sft --n`)")
    ap.add_argument("--sft-epochs", type=int, default=2, help="SFT epochs (the harbor_sft recipe's 2)")
    ap.add_argument("--max-turns", type=int, default=0, help="tool turns an episode (0: the recipe's)")
    ap.add_argument("--val-tasks", type=int, default=0, help="the first K held-out tasks (0: all 15)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--resume", action="store_true", help="reuse the stages a run in --out finished")
    ap.add_argument("--tiny", action="store_true", help="smoke-run sizes: " + ", ".join(f"{k}={v}" for k, v in TINY.items()))  # fmt: skip
    a = ap.parse_args()
    if a.tiny:
        for key, value in TINY.items():
            setattr(a, key, value)
    return a


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    cols = ("pass_rate", *SORTS)
    lines = ["| condition | " + " | ".join(c.split("/")[-1] for c in cols) + " | seeds |", "|---" * (len(cols) + 2) + "|"]  # fmt: skip
    for name, runs in results.items():
        cells = []
        for c in cols:
            values = [r[c] for r in runs if c in r]
            cells.append("-" if not values else f"{statistics.fmean(values):.3f}" + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else ""))  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(runs)} |")
    return "\n".join(lines)


def main() -> None:
    a = parse()
    out = Path(a.out).resolve()
    if out.exists() and any(out.iterdir()) and not a.resume:
        sys.exit(f"--out {out} is not empty (--resume reuses what it holds)")
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; model {a.model}; out {out}", flush=True)
    stages = Stages(out, a.resume)
    val = held_out_rows(a.val_tasks, out)
    names = {json.loads(x)["extra_info"]["task"] for x in val.read_text().splitlines()} if val else set()
    results: dict[str, list[dict[str, Any]]] = {k: [v] for k, v in shortcuts(names).items()}
    results["untrained"] = [evaluate(a, stages, a.model, out / "eval_untrained", val, 1)]
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        demos, sft_dir = out / f"demos_s{seed}", out / f"sft_s{seed}"
        data = ["data", "harbor_sft", "--out", str(demos), "--n", str(a.demos), "--seed", str(seed)]
        stages.run(demos.name, demos / "train.jsonl", data, out / f"demos_s{seed}.log")
        args = [
            "sft", "harbor_sft", f"model.path={a.model}", f"data.train_files=[{demos / 'train.jsonl'}]",
            f"trainer.total_epochs={a.sft_epochs}", f"trainer.seed={seed}", f"trainer.num_threads={a.threads}",
            "trainer.logger=[jsonl]", f"trainer.default_local_dir={sft_dir}",
        ]  # fmt: skip
        stages.run(sft_dir.name, sft_dir / "model", args, out / f"sft_s{seed}.log")
        model = str(sft_dir / "model")
        results.setdefault("SFT", []).append(evaluate(a, stages, model, out / f"eval_sft_s{seed}", val, seed))
        results.setdefault("SFT + RL", []).append(rl(a, stages, model, out / f"sft_rl_s{seed}", val, seed))
        print(f"  seed {seed}: SFT {results['SFT'][-1]['pass_rate']:.3f}, SFT + RL {results['SFT + RL'][-1]['pass_rate']:.3f}", flush=True)  # fmt: skip
    sft, both = [r["samples"] for r in results["SFT"]], [r["samples"] for r in results["SFT + RL"]]
    gains = {
        "SFT - untrained": paired([results["untrained"][0]["samples"]], sft),
        "SFT + RL - SFT": paired(sft, both),
    }
    print("\n" + table(results))
    for name, by_sort in gains.items():
        p = by_sort["all"]["pooled"]
        print(f"{name}: {100 * p['diff']:+.1f} points (95 % {100 * p['low']:+.1f} to {100 * p['high']:+.1f}) over {p['questions']} tasks x {p['seeds']} seeds")  # fmt: skip
    for run in (*results["SFT"], *results["SFT + RL"], *results["untrained"]):
        sample_file(Path(run["samples"]))  # every condition left its per-task samples
    path = out / "harbor_agent.json"
    path.write_text(json.dumps({"settings": vars(a), "machine": cpu_name(), "results": results, "gains": gains}, indent=1) + "\n")  # fmt: skip
    print(f"results: {path} ({time.strftime('%Y-%m-%d %H:%M')})")


if __name__ == "__main__":
    main()
