"""Does a single-turn recipe make a model worse on a reasoning-gym dataset it was not tuned on?

    python benchmarks/gym_recipes.py --datasets letter_counting,gcd,family_relationships --seeds 1,2,3
    python benchmarks/gym_recipes.py ... --jobs 2 --threads 1 --out runs/gym   # two runs at a time
    python benchmarks/gym_recipes.py ... --set actor.optim.lr=1e-5            # a lever, on every run
    python benchmarks/gym_recipes.py ... --summary                            # only read finished runs

Each run is `turnrl train RECIPE data.task=reasoning_gym:DATASET trainer.seed=SEED` (the recipe's own
`data.task_args` are dropped with its task: only the dataset is swapped). Per dataset and seed it
prints greedy held-out accuracy before and after training, the format rate, and the shortcut a
learning claim must beat on the same validation rows (the best constant answer,
`turnrl.evaluate.shortcuts`); then what the trained model's answers look like: the share of its
greedy answers that are its single most frequent answer (1.0 = it collapsed to one guess).
A dataset passes when the mean over seeds ends at or above both the untrained mean and the best
constant's mean.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _cli import cli  # type: ignore[import-not-found]

from turnrl.config import load_config
from turnrl.evaluate.shortcuts import best_constant, rules_for, score_rules
from turnrl.rewards.registry import BUILTIN, resolve
from turnrl.tasks import get, scorers
from turnrl.tasks.gym import extract_answer


def overrides(dataset: str, seed: int, run: Path, args: argparse.Namespace) -> list[str]:
    return [
        f"data.task=reasoning_gym:{dataset}",
        f"trainer.seed={seed}",
        f"trainer.num_threads={args.threads}",
        f"trainer.default_local_dir={run}",
        *args.set,
    ]


def finished(run: Path) -> bool:
    """A run whose last metrics line is its final step's (written after its last validation)."""
    if not (run / "config.yaml").is_file() or not (run / "metrics.jsonl").is_file():
        return False
    total = load_config(str(run / "config.yaml"), []).trainer.total_training_steps
    return (run / "val_samples" / f"step_{total}.jsonl").is_file()


def train(dataset: str, seed: int, out: Path, args: argparse.Namespace) -> None:
    run = out / f"{dataset}_s{seed}"
    if finished(run):
        return
    print(f"training {run.name} ...", flush=True)
    wall = cli(["train", args.recipe, *overrides(dataset, seed, run, args)], out / f"{run.name}.log")
    print(f"{run.name}: {wall / 60:.1f} min", flush=True)


def val_curve(run: Path) -> list[tuple[int, float, float]]:
    """(step, val/accuracy, val/format_rate) of every validation in the run."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [
        (int(r.get("step", 0)), r["val/accuracy"], r.get("val/format_rate", float("nan")))
        for r in rows if "val/accuracy" in r
    ]  # fmt: skip


def collapse(run: Path, step: int) -> tuple[float, str]:
    """The share of greedy answers at `step` that are the model's most frequent answer, and that answer."""
    samples = [json.loads(x) for x in (run / "val_samples" / f"step_{step}.jsonl").read_text().splitlines()]
    answers = Counter(str(extract_answer(s["response"])) for s in samples)
    answer, count = answers.most_common(1)[0]
    return count / len(samples), answer


def measure(dataset: str, seed: int, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = out / f"{dataset}_s{seed}"
    cfg = load_config(str(run / "config.yaml"), [])
    rows = get(cfg.data.task).rows("val", cfg.trainer.seed, **dict(cfg.data.task_args))
    constant, constant_acc = best_constant(rows)
    scorer = resolve(rows[0]["data_source"], table={**BUILTIN, **scorers()})
    rules = {
        k: v["acc"] for k, v in score_rules(rows, scorer, rules_for(rows)).items() if "constant" not in k
    }
    rule = max(rules, key=rules.__getitem__, default="")
    curve = val_curve(run)
    first, last = curve[0], curve[-1]
    share, answer = collapse(run, cfg.trainer.total_training_steps)
    share0, answer0 = collapse(run, 0)
    return dict(
        seed=seed, untrained=first[1], final=last[1], format0=first[2], format=last[2],
        constant=constant, constant_acc=constant_acc, curve=[round(c[1], 3) for c in curve],
        top_share=share, top_answer=answer, top_share0=share0, top_answer0=answer0,
        rule=rule, rule_acc=rules.get(rule, float("nan")),
    )  # fmt: skip


def spread(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| dataset | seed | untrained | best constant | best other shortcut | after training "
        "| format before / after | accuracy at each validation | most frequent answer's share, before / after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for dataset, rs in results.items():
        for r in rs:
            shortcut = f"{r['rule_acc']:.3f} ({r['rule']})" if r["rule"] else "-"
            lines.append(
                f"| {dataset} | {r['seed']} | {r['untrained']:.3f} | {r['constant_acc']:.3f} "
                f'("{r["constant"]}") | {shortcut} '
                f"| **{r['final']:.3f}** | {r['format0']:.2f} / {r['format']:.2f} "
                f"| {' / '.join(f'{c:.2f}' for c in r['curve'])} "
                f'| {r["top_share0"]:.2f} ("{r["top_answer0"]}") / {r["top_share"]:.2f} ("{r["top_answer"]}") |'
            )
        final = [r["final"] for r in rs]
        bar = max(statistics.mean(r["untrained"] for r in rs), statistics.mean(r["constant_acc"] for r in rs))
        ok = statistics.mean(final) >= bar
        verdicts.append(
            f"{dataset}: after training {spread(final)} against the higher of untrained and best constant "
            f"{bar:.3f}: {'not worse' if ok else 'WORSE'}"
        )
    return "\n".join([*lines, "", *verdicts])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="gym_chain_sum")
    ap.add_argument("--datasets", default="letter_counting,gcd,family_relationships")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--out", default="runs/gym_recipes")
    ap.add_argument("--set", action="append", default=[], help="an override for every run (repeatable)")
    ap.add_argument("--summary", action="store_true", help="do not train: read the finished runs")
    args = ap.parse_args()
    out = Path(args.out)
    datasets = [d for d in args.datasets.split(",") if d]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    work = [(d, s) for d in datasets for s in seeds]
    if not args.summary:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda ds: train(ds[0], ds[1], out, args), work))
    results: dict[str, list[dict[str, Any]]] = {}
    for d, s in work:
        if finished(out / f"{d}_s{s}"):
            results.setdefault(d, []).append(measure(d, s, out, args))
        else:
            print(f"{d}_s{s}: not finished, left out", file=sys.stderr)
    print(f"recipe {args.recipe}, overrides {args.set or 'none'}\n")
    print(table(results))


if __name__ == "__main__":
    main()
