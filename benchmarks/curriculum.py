"""The curriculum sampler vs the plain one: fewer zero-advantage groups, and what it does to accuracy.

    python benchmarks/curriculum.py                                # the default job (addition), 20 steps
    python benchmarks/curriculum.py --recipe gym_chain_sum --steps 60
    python benchmarks/curriculum.py --seeds 1 2 3 data.curriculum.window=1   # overrides go to both runs
    python benchmarks/curriculum.py --tiny                         # smoke run: tiny-random, 2 steps (< 2 min)

Per seed, two `turnrl train` runs one after the other in child processes, the same recipe, seed and
overrides, differing only in `data.sampler`:

    plain        every prompt once per epoch, in the seeded order
    curriculum   skips prompts whose last `data.curriculum.window` groups scored all alike
                 (docs/algorithms.md, "Curriculum sampling")

The default task is the built-in addition task (the `grpo` recipe: 32 training rows, 4 steps an
epoch): the embedded model learns it within a few steps, after which most groups are all right, so
most of a plain run's generation goes to groups with zero GRPO advantage. 20 steps are 5 epochs: the
curriculum's default window (2) needs a prompt to come back twice before it can skip it.

Per condition the table gives `data/flat_groups` (the fraction of a step's groups whose scores were
all equal, mean over the steps), `val/accuracy` before training and at the end (greedy, the task's
held-out problems), the curriculum's prompts skipped and revisited in all, and the wall time of the
run (model load and validation included, the same for both). Everything is written to
`<out>/curriculum.json`; each run's log is next to its directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from _cli import TINY_RUN, cli, read_jsonl

SAMPLERS = ("plain", "curriculum")
TINY = [*TINY_RUN, "trainer.val_before_train=false"]


def one_run(a: argparse.Namespace, out: Path, sampler: str, seed: int) -> dict[str, Any]:
    """`turnrl train` with `data.sampler=<sampler>`: its record (per-step flat fraction, accuracy)."""
    run_dir = out / f"{sampler}_seed{seed}"
    args = [
        "train",
        *([a.recipe] if a.recipe else []),
        f"trainer.seed={seed}",
        "trainer.logger=[jsonl]",
        "trainer.save_freq=0",
        f"trainer.total_training_steps={a.steps}",
        *([f"trainer.num_threads={a.threads}"] if a.threads else []),
        *(TINY if a.tiny else []),
        *a.overrides,
        f"data.sampler={sampler}",
        f"trainer.default_local_dir={run_dir}",
    ]
    wall = cli(args, out / f"{sampler}_seed{seed}.log")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    steps = [r for r in rows if "timing_s/step" in r]
    val = [r for r in rows if "val/accuracy" in r]
    flat = [float(r["data/flat_groups"]) for r in steps if "data/flat_groups" in r]
    return {
        "run_dir": str(run_dir),
        "wall_s": wall,
        "steps": len(steps),
        "flat_groups_per_step": flat,
        "flat_groups_mean": statistics.fmean(flat) if flat else float("nan"),
        "val_accuracy_start": float(val[0]["val/accuracy"]) if val and val[0]["step"] == 0 else None,
        "val_accuracy_end": float(val[-1]["val/accuracy"]) if val else float("nan"),
        "skipped": sum(int(r.get("data/curriculum/skipped", 0)) for r in steps),
        "revisited": sum(int(r.get("data/curriculum/revisited", 0)) for r in steps),
        "train_s": sum(float(r["timing_s/step"]) for r in steps),
    }


def table(runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    head = (
        f"{'sampler':<11} {'seed':>4} {'flat groups':>11} {'val acc start':>13} {'val acc end':>11} "
        f"{'skipped':>7} {'revisited':>9} {'train s':>8} {'wall s':>7}"
    )
    lines = [head]
    for sampler, by_seed in runs.items():
        for seed, r in by_seed.items():
            start = r["val_accuracy_start"]
            lines.append(
                f"{sampler:<11} {seed:>4} {r['flat_groups_mean']:>11.3f} "
                f"{'-' if start is None else f'{start:.3f}':>13} {r['val_accuracy_end']:>11.3f} "
                f"{r['skipped']:>7} {r['revisited']:>9} {r['train_s']:>8.0f} {r['wall_s']:>7.0f}"
            )
    if any(len(by_seed) > 1 for by_seed in runs.values()):
        lines.append("")
        for sampler, by_seed in runs.items():
            flat = [r["flat_groups_mean"] for r in by_seed.values()]
            acc = [r["val_accuracy_end"] for r in by_seed.values()]
            lines.append(
                f"{sampler:<11} mean over {len(by_seed)} seeds: flat groups {statistics.fmean(flat):.3f}, "
                f"val acc end {statistics.fmean(acc):.3f} (spread {max(acc) - min(acc):.3f})"
            )
    lines.append("\nflat groups: the fraction of a step's groups whose scores were all equal (zero GRPO")
    lines.append("advantage), mean over the steps; train s: the sum of the steps' timing_s/step.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*", help="key=value overrides for both runs")
    p.add_argument(
        "--recipe", default="grpo", help="a recipe name or file (default: grpo, the addition task)"
    )
    p.add_argument(
        "--steps", type=int, default=0, help="training steps per run (default 20: 5 epochs; --tiny 2)"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1], help="trainer.seed of each pair of runs")
    p.add_argument("--threads", type=int, default=0, help="trainer.num_threads (0 = torch's default)")
    p.add_argument("--out", type=Path, default=Path("runs/curriculum"))
    p.add_argument("--tiny", action="store_true", help="smoke run: tiny-random, 2 steps, small batches")
    a = p.parse_args()
    a.steps = a.steps or (2 if a.tiny else 20)
    a.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs: dict[str, dict[int, dict[str, Any]]] = {s: {} for s in SAMPLERS}
    for seed in a.seeds:
        for sampler in SAMPLERS:
            print(f"{sampler}, seed {seed}: {a.steps} steps of {a.recipe or 'the default job'}", flush=True)
            runs[sampler][seed] = one_run(a, a.out, sampler, seed)
    print()
    print(table(runs))
    summary = {
        "recipe": a.recipe,
        "steps": a.steps,
        "overrides": a.overrides,
        "runs": runs,
        "tiny": a.tiny,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "total_wall_s": time.perf_counter() - start,
    }
    (a.out / "curriculum.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"\nwritten: {a.out / 'curriculum.json'}")


if __name__ == "__main__":
    main()
