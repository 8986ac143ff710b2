"""Peak memory of a training run, and what each memory lever saves, side by side.

    python benchmarks/memory.py                                   # the default job, 2 steps a lever
    python benchmarks/memory.py --recipe gym_chain_sum --steps 3 --threads 1
    python benchmarks/memory.py --levers default,micro4 --set data.train_batch_size=4

Each lever is a `turnrl train RECIPE trainer.total_training_steps=STEPS ...` child process of its
own, one after the other, with the lever's overrides added (the table below); the number is the
run's own `perf/max_rss_gb` (the process's peak resident memory, `VmHWM`: what the kernel had to
find, freed-but-kept allocator memory included) after its last step, and `timing_s/step` averaged
over the steps after the first. Prints a Markdown table with the lever, its overrides, the peak,
the saving against `default` and the seconds per step against it.

On a CPU, the default job's peak (4.7-4.9 GiB on a 2-core AMD EPYC, the embedded 135M model) is
the float32 weights (0.5 GiB), their bfloat16 rollout copy and its oneDNN layout (0.25 GiB each;
`no_rollout_copy` saved 0.68), AdamW's two moments (1.0 GiB) and the gradients (0.5 GiB) during the
update, the update's activations for `actor.ppo_micro_batch_size` responses, and about 0.4 GiB of
libraries (docs/results/memory.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _cli import cpu_name

LEVERS: dict[str, list[str]] = {
    "default": [],
    "micro4": ["actor.ppo_micro_batch_size=4", "actor.log_prob_micro_batch_size=4"],
    "checkpointing": ["model.gradient_checkpointing=true"],
    "lora16": ["model.lora_rank=16"],
    "no_rollout_copy": ["rollout.dtype=float32"],
}
"""Each lever's overrides on top of the recipe (`default`: none)."""


def run(recipe: str, steps: int, threads: int, extra: list[str], out: Path) -> dict[str, float]:
    """One child `turnrl train`; its peak RSS and mean seconds per step (after the first)."""
    cmd = [
        sys.executable, "-m", "turnrl.cli", "train", recipe,
        f"trainer.total_training_steps={steps}", f"trainer.num_threads={threads}",
        "trainer.val_before_train=false", f"trainer.default_local_dir={out}", *extra,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"memory.py: {' '.join(extra) or 'default'} failed: {tail}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    peak = max(r.get("perf/max_rss_gb", 0.0) for r in rows)
    times = [r["timing_s/step"] for r in rows if "timing_s/step" in r]
    later = times[1:] or times
    return {"peak_gb": peak, "step_s": sum(later) / len(later)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="memory.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--recipe", default="grpo", help="a built-in recipe or a .yaml file (default: %(default)s)"
    )
    p.add_argument("--steps", type=int, default=2, help="training steps a lever (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="torch threads a run (0: torch's default)")
    p.add_argument("--levers", default=",".join(LEVERS), help="comma-separated, of: " + ", ".join(LEVERS))
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every lever")
    a = p.parse_args(argv)
    levers = [x.strip() for x in a.levers.split(",") if x.strip()]
    unknown = [x for x in levers if x not in LEVERS]
    if unknown or not levers:
        p.error(f"--levers: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(LEVERS)}")
    if a.steps < 1:
        p.error(f"--steps {a.steps}: must be >= 1")
    print(f"{a.recipe}, {a.steps} steps a lever, {a.threads or 'default'} threads, {cpu_name()}\n")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="turnrl-memory-") as tmp:
        for name in levers:
            results[name] = run(a.recipe, a.steps, a.threads, [*a.set, *LEVERS[name]], Path(tmp) / name)
            print(
                f"{name}: {results[name]['peak_gb']:.2f} GiB, {results[name]['step_s']:.1f} s/step",
                flush=True,
            )
    base = results.get("default")
    print(
        "\n| lever | overrides | peak RSS (GiB) | saved | s/step | time vs default |\n|---|---|---|---|---|---|"
    )
    for name, r in results.items():
        saved = f"{base['peak_gb'] - r['peak_gb']:+.2f}" if base else ""
        ratio = f"{r['step_s'] / base['step_s']:.2f}x" if base else ""
        print(
            f"| {name} | {' '.join(LEVERS[name]) or '(none)'} | {r['peak_gb']:.2f} | {saved} | {r['step_s']:.1f} | {ratio} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
