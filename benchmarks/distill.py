"""On-policy distillation vs GRPO: how fast does an untrained student reach its teacher?

    python benchmarks/distill.py                              # teacher = the default job, then both students
    python benchmarks/distill.py --teacher runs/x --steps 8   # an existing teacher (a run or model directory)
    python benchmarks/distill.py --tiny                       # smoke run: tiny-random, 2 steps (< 2 min)

Every stage is the real CLI in a child process, one after the other:

    teacher   turnrl train                      the default job (GRPO on the embedded SmolLM2-135M, the
                                                addition task, one epoch = 4 steps), into <out>/teacher;
                                                skipped with --teacher DIR
    opd       turnrl train model.path=smollm2-135m-instruct algorithm.adv_estimator=opd
              teacher.model.path=<teacher>      the untrained student, distilled on its own samples
    grpo      turnrl train model.path=smollm2-135m-instruct
                                                the same student with the default job's GRPO

Both students run the same steps (`--steps`; default: the teacher's own number of steps) with the
same seed, validating before training and after every step (`trainer.test_freq=1`; greedy, on the
task's held-out problems, as the teacher's final validation). The teacher's score is its final
`val/test_score/mean` (and `val/accuracy`) from its metrics.jsonl. For each student the table gives the
validation score per step and the first step at which it reaches 95 % of the teacher's score, with
the cumulative training seconds to that step (the sum of the metrics' `timing_s/step`: validation
passes, the same for both students, are not counted), or "not reached".

OPD reads no task reward: its advantage is the teacher's log-prob of each sampled token minus the
student's (docs/algorithms.md). The students are the teacher's own starting point, so OPD here
measures how quickly the teacher's learned behaviour transfers through per-token supervision, and
GRPO how quickly the student rediscovers it from the outcome reward alone. Everything is written to
`<out>/distill.json`; each stage's log is next to its run directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from _cli import TINY_RUN, cli, read_jsonl

STUDENT = "smollm2-135m-instruct"
TARGET = 0.95  # of the teacher's validation score
TINY = TINY_RUN


def common(a: argparse.Namespace) -> list[str]:
    """What every stage shares: the seed, the threads, the loggers (and the smoke run's sizes)."""
    out = [f"trainer.seed={a.seed}", "trainer.logger=[jsonl]"]
    if a.threads:
        out.append(f"trainer.num_threads={a.threads}")
    return out + (TINY if a.tiny else [])


def train_teacher(a: argparse.Namespace, out: Path) -> tuple[Path, float]:
    """The default job into `<out>/teacher` (its last step's checkpoint is the teacher): (run, wall s)."""
    run_dir = out / "teacher"
    args = ["train", *common(a), f"trainer.default_local_dir={run_dir}"]
    if a.tiny:
        # tiny-random's weights follow the run's seed: another seed makes a teacher that is not the
        # student's starting point (2 steps of a zero reward would not move it)
        args += [
            f"trainer.total_training_steps={a.steps or 2}",
            "trainer.val_before_train=false",
            f"trainer.seed={a.seed + 1}",
        ]
    else:  # the default job as docs/results/distillation.md runs it (seed 1); the students use `--seed`
        args.append("trainer.seed=1")
    return run_dir, cli(args, out / "teacher.log")


def final_validation(run_dir: Path) -> dict[str, float]:
    """The teacher's last validation row: its score and accuracy, the step, and its total steps."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    val = [r for r in rows if "val/test_score/mean" in r]
    if not val:
        raise SystemExit(f"{run_dir / 'metrics.jsonl'} has no validation row (val/test_score/mean)")
    last = val[-1]
    steps = max(
        (int(r.get("training/global_step", r["step"])) for r in rows if "timing_s/step" in r), default=0
    )
    return {
        "score": float(last["val/test_score/mean"]),
        "accuracy": float(last.get("val/accuracy", float("nan"))),
        "step": int(last["step"]),
        "steps": steps,
    }


def student(a: argparse.Namespace, out: Path, name: str, extra: list[str], steps: int) -> dict[str, Any]:
    """One student run, validated before training and after every step: its per-step record."""
    run_dir = out / name
    args = [
        "train",
        *common(a),
        *([] if a.tiny else [f"model.path={STUDENT}"]),
        *extra,
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=1",
        "trainer.val_before_train=true",
        "trainer.save_freq=0",
        f"trainer.default_local_dir={run_dir}",
    ]
    wall = cli(args, out / f"{name}.log")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    step_s = {int(r["step"]): float(r["timing_s/step"]) for r in rows if "timing_s/step" in r}
    per_step: dict[int, dict[str, float]] = {}
    for r in rows:
        if "val/test_score/mean" in r:
            s = int(r["step"])
            per_step[s] = {
                "score": float(r["val/test_score/mean"]),
                "accuracy": float(r.get("val/accuracy", float("nan"))),
                "train_s": sum(t for k, t in step_s.items() if k <= s),
            }
            if "distill/reverse_kl/mean" in r:  # a step's own metrics share the row of its validation
                per_step[s]["reverse_kl"] = float(r["distill/reverse_kl/mean"])
    return {"run_dir": str(run_dir), "wall_s": wall, "steps": dict(sorted(per_step.items()))}


def first_reaching(record: dict[str, Any], threshold: float) -> tuple[int, float] | None:
    """(step, cumulative training seconds) of the first validation at or above `threshold`."""
    for step, v in record["steps"].items():
        if v["score"] >= threshold:
            return step, v["train_s"]
    return None


def table(teacher: dict[str, float], runs: dict[str, dict[str, Any]]) -> str:
    threshold = TARGET * teacher["score"]
    lines = [
        f"teacher: val/test_score/mean {teacher['score']:.3f}, val/accuracy {teacher['accuracy']:.3f} "
        f"(step {teacher['step']}); target {TARGET:.0%} of its score = {threshold:.3f}",
    ]
    if teacher["score"] != teacher["score"]:
        lines.append("  (no teacher score: --teacher names a directory without metrics.jsonl)")
    elif teacher["score"] <= 0:
        lines.append(
            "  (the teacher scores <= 0: every validation reaches the target; a smoke run's numbers)"
        )
    steps = sorted({s for r in runs.values() for s in r["steps"]})
    head = f"{'step':>4}  " + "  ".join(f"{n + ' score':>11} {n + ' acc':>9}" for n in runs)
    lines += ["", head]
    for s in steps:
        cells = []
        for r in runs.values():
            v = r["steps"].get(s)
            cells.append(f"{v['score']:>11.3f} {v['accuracy']:>9.3f}" if v else f"{'-':>11} {'-':>9}")
        lines.append(f"{s:>4}  " + "  ".join(cells))
    lines.append("")
    for name, r in runs.items():
        hit = first_reaching(r, threshold)
        reached = f"step {hit[0]} after {hit[1]:.0f} s of training" if hit else "not reached"
        kl = [v["reverse_kl"] for v in r["steps"].values() if "reverse_kl" in v]
        extra = f"; distill/reverse_kl/mean {kl[0]:.4g} -> {kl[-1]:.4g}" if kl else ""
        lines.append(
            f"{name:>5}: {TARGET:.0%} of the teacher: {reached} (run wall {r['wall_s']:.0f} s){extra}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/distill"))
    p.add_argument(
        "--teacher", type=Path, help="an existing teacher (run or model directory): no teacher run"
    )
    p.add_argument("--steps", type=int, default=0, help="student steps (default: the teacher's steps)")
    p.add_argument(
        "--seed", type=int, default=2,
        help="the students' trainer.seed (the teacher is the default job, seed 1: a GRPO student on seed 1 would replay it)",
    )  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="trainer.num_threads (0 = torch's default)")
    p.add_argument("--tiny", action="store_true", help="smoke run: tiny-random, 2 steps, small batches")
    a = p.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if a.teacher:
        teacher_dir, teacher_wall = a.teacher, 0.0
    else:
        print(f"teacher: the default job into {out / 'teacher'}", flush=True)
        teacher_dir, teacher_wall = train_teacher(a, out)
    teacher: dict[str, float] = {"score": float("nan"), "accuracy": float("nan"), "step": 0, "steps": 0}
    if (teacher_dir / "metrics.jsonl").is_file():
        teacher = final_validation(teacher_dir)
    elif not a.steps:
        raise SystemExit(f"{teacher_dir} has no metrics.jsonl to read its score and steps from; pass --steps")
    steps = a.steps or teacher["steps"] or 2
    runs: dict[str, dict[str, Any]] = {}
    for name, extra in (
        ("opd", ["algorithm.adv_estimator=opd", f"teacher.model.path={teacher_dir}"]),
        ("grpo", []),
    ):
        print(f"{name}: {steps} steps, validated every step", flush=True)
        runs[name] = student(a, out, name, extra, steps)
    print()
    print(table(teacher, runs))
    summary = {
        "teacher": {"dir": str(teacher_dir), "wall_s": teacher_wall, **teacher},
        "target": TARGET,
        "students": runs,
        "reached": {n: first_reaching(r, TARGET * teacher["score"]) for n, r in runs.items()},
        "tiny": a.tiny,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "total_wall_s": time.perf_counter() - start,
    }
    (out / "distill.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"\nwritten: {out / 'distill.json'}")


if __name__ == "__main__":
    main()
