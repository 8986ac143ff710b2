"""Code agent: does SFT on scripted solutions, then RL, teach a held-out skill? Three conditions.

    python benchmarks/code_agent.py                                  # embedded SmolLM2-135M, SFT then RL sized for ~45 min on 2 cores
    python benchmarks/code_agent.py --steps 8 --demos 256 --out runs/code_agent
    python benchmarks/code_agent.py --model tiny-random --tiny       # smoke run (~2-3 min, scores are ~0)
    python benchmarks/code_agent.py --demo-problems half             # SFT shows 10 training problems, RL trains on all 19
    python benchmarks/code_agent.py --demo-problems half --retry-fraction 0.3   # and a third of them fix a wrong first try

Every stage is the real CLI in a child process, one after the other:

    untrained    turnrl eval code_agent model.path=MODEL
    SFT          turnrl data code_sft, turnrl sft on its demonstrations, turnrl eval of <sft>/model
    SFT + RL     turnrl train code_agent model.path=<sft>/model                  (its final validation)

The measure is the held-out pass rate: the fraction of hidden tests passed by the greedy answer's
program on the code task's validation rows, apart for its two sorts: new problems of the training
families (`turnrl/code/new_problem`, one held-out problem per family) and the problems of the
families no training row or demonstration shows (`turnrl/code/new_family`: `list_transform`,
`words`). It is the task reward's `acc`: `val/accuracy/<source>` of a training run's final
validation, `metrics.per_data_source` of `turnrl eval`'s greedy pass. The reward itself (0.1 for a
program that runs + 0.9 x the pass rate) and the share of answers holding a program are reported
beside it, and so is the shortcut baseline: the best constant output per row (the one expected
output that passes most of its tests; the task draws tests so that it is at most 1 in 10).
`--seeds N` runs SFT and SFT then RL for seeds 1..N (the untrained model once: greedy is
seed-free); the table gives mean (min-max); `--resume` reuses the stages an earlier run finished
with the same command and refuses, in one line, one that ran another (a different --steps: use
another --out). Each condition's wall time is split into training (data + SFT and/or RL) and
evaluation. The table is printed and written with the settings to `<out>/code_agent.json`.

CPU sizing (defaults): SFT 192 demonstrations (about 450 tokens each, prompt included), one
epoch, 8 per step at lr 1e-4; RL 6 steps of 8 prompts x 4 samples, at most 2 code runs per episode
in a 256-token response, no KL term (no reference forward). On a 2-core CPU a token costs ~10 ms
forward + backward for SmolLM2-135M, and an RL step of 4 x 4 such episodes took 79-104 s in an early run,
so the estimate is SFT ~12 min (24 steps) and RL ~3-3.5 min a step: SFT then RL ~35 min with its validations.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _cli import Stages, report, sft_args

SORTS = {"new_problem": "turnrl/code/new_problem", "new_family": "turnrl/code/new_family"}

HALF = "list_sum,list_max,reverse,upper,gcd,digit_sum,factorial,fibonacci,count_even,count_vowels"
"""Two problems of each training family: a split that leaves RL nine training problems SFT never showed."""

TINY = {  # a smoke run: every stage and file, in about two minutes
    "seeds": 1,
    "steps": 1,
    "batch": 2,
    "n": 2,
    "response_length": 32,
    "demos": 8,
    "sft_batch": 8,
    "max_turns": 1,
    "val_prompts": 8,
    "val_batch": 8,
}


def common(a: argparse.Namespace, val_file: Path | None, seed: int) -> list[str]:
    """What the evaluations and the RL run share: the task, budgets, sampling and validation."""
    return [
        "code_agent",
        *([f"data.val_files=[{val_file}]"] if val_file else []),  # else the task's 32 held-out rows
        f"data.max_response_length={a.response_length}",
        f"data.val_batch_size={a.val_batch}",
        # one engine call per validation batch or RL rollout (the engine cuts its calls to this size)
        f"rollout.generation_batch_size={max(a.val_batch, a.batch * a.n)}",
        f"rollout.multi_turn.max_turns={a.max_turns}",
        f"trainer.seed={seed}",
        f"trainer.num_threads={a.threads}",
    ]


def rl_args(a: argparse.Namespace, model: str, run_dir: Path, val_file: Path | None, seed: int) -> list[str]:  # fmt: skip
    return [
        "train",
        *common(a, val_file, seed),
        f"model.path={model}",
        f"data.train_batch_size={a.batch}",
        f"rollout.n={a.n}",
        f"actor.ppo_mini_batch_size={max(1, a.batch // 2)}",
        "actor.ppo_micro_batch_size=8",
        f"actor.optim.lr={a.rl_lr}",
        "actor.optim.lr_warmup_steps=0",
        "actor.use_kl_loss=false",
        f"trainer.total_training_steps={a.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=0",  # validated once, after the last step
        "trainer.save_freq=0",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={run_dir}",
    ]


def first(metrics: dict[str, Any], *keys: str) -> float:
    """The first of `keys` that `metrics` holds (the name a metric goes by may differ by version)."""
    for key in keys:
        if key in metrics:
            return float(metrics[key])
    raise KeyError(f"none of {keys} in {sorted(metrics)}")


def evaluate(a: argparse.Namespace, stages: Stages, model: str, out: Path, val_file: Path | None, seed: int) -> dict[str, float]:  # fmt: skip
    """`turnrl eval` on the held-out rows, greedy: pass rate (overall and by sort), reward, format
    rate, the greedy pass's seconds and the process's wall seconds (start-up included)."""
    args = ["eval", *common(a, val_file, seed), f"model.path={model}", "eval.n=0", "--out", str(out)]
    wall = stages.run(out.name, out / "summary.json", args, out.with_suffix(".log"))
    summary = json.loads((out / "summary.json").read_text())
    greedy = {**summary["diagnostics"]["greedy"], **summary["metrics"]["overall"]}
    per_source = summary["metrics"]["per_data_source"]
    return {
        "pass_rate": first(greedy, "accuracy", "reward_extra/acc/mean"),
        **{f"pass_rate/{sort}": float(per_source[src]["accuracy"]) for sort, src in SORTS.items()},
        "score": first(greedy, "greedy_score"),
        "formatted": first(greedy, "format_rate", "reward_extra/formatted/mean"),
        "eval_s": float(summary["passes"]["greedy"]["seconds"]),
        "wall_s": wall,
    }


def rl(a: argparse.Namespace, stages: Stages, model: str, run_dir: Path, val_file: Path | None, seed: int) -> dict[str, float]:  # fmt: skip
    """One RL run, measured by its final validation (the same greedy pass `turnrl eval` makes)."""
    args = rl_args(a, model, run_dir, val_file, seed)
    wall = stages.run(run_dir.name, run_dir / "metrics.jsonl", args, run_dir.with_suffix(".log"))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in rows if "val/test_score/mean" in r][-1]
    return {
        "pass_rate": first(final, "val/accuracy", "val/acc/mean"),
        **{f"pass_rate/{sort}": float(final[f"val/accuracy/{src}"]) for sort, src in SORTS.items()},
        "score": first(final, "val/test_score/mean"),
        "formatted": first(final, "val/format_rate", "val/formatted/mean"),
        "eval_s": float(final.get("timing_s/validate", 0.0)),
        "wall_s": wall,
    }


def best_constant(val_file: Path) -> dict[str, float]:
    """The shortcut baseline: per row, the pass rate of the best constant program (one that prints the
    expected output passing most of the row's tests), averaged over the rows of each sort."""
    from turnrl.rewards.code import same_output

    by_sort: dict[str, list[float]] = {sort: [] for sort in SORTS}
    for line in val_file.read_text().splitlines():
        row = json.loads(line)
        outputs = row["reward_model"]["ground_truth"]["outputs"]
        best = max(sum(same_output(c, o) for o in outputs) for c in set(outputs)) / len(outputs)
        sort = next(k for k, src in SORTS.items() if src == row["data_source"])
        by_sort[sort].append(best)
    every = [x for xs in by_sort.values() for x in xs]
    return {"pass_rate": statistics.fmean(every)} | {
        f"pass_rate/{sort}": statistics.fmean(xs) for sort, xs in by_sort.items() if xs
    }


def validation_rows(k: int, out: Path) -> Path:
    """The first `k` held-out rows as a file (0: all 52). The rows cycle through the 13 held-out
    problems, so any k >= 13 covers each of them."""
    from turnrl.tasks import write_task

    val = write_task("code", out / "task", 0).val
    path = out / f"val_{k or 'all'}.jsonl"
    lines = val.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:k] if k else lines))
    return path


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model.path of the untrained model")
    ap.add_argument("--out", default="", help="output directory (default runs/code_agent-<time>)")
    ap.add_argument("--steps", type=int, default=6, help="RL steps")
    ap.add_argument("--batch", type=int, default=8, help="RL prompts per step")
    ap.add_argument("--n", type=int, default=4, help="RL samples per prompt")
    ap.add_argument("--rl-lr", type=float, default=1e-5, help="RL actor learning rate")
    ap.add_argument("--response-length", type=int, default=256, help="tokens of a whole episode's response")
    ap.add_argument("--max-turns", type=int, default=2, help="code runs per episode")
    ap.add_argument("--val-batch", type=int, default=32, help="validation prompts per generation call")
    ap.add_argument(
        "--val-prompts", type=int, default=0, help="validate on the first K held-out rows (0 = all 52)"
    )
    ap.add_argument("--demos", type=int, default=192, help="SFT demonstrations")
    ap.add_argument(
        "--demo-problems",
        default="",
        help="demonstrate only these training problems (comma-separated, as `turnrl data code_sft "
        f"--problems`; `half` = {HALF}); RL still trains on every training problem, so the "
        "undemonstrated ones give it groups that vary (default: every training problem)",
    )
    ap.add_argument(
        "--retry-fraction", type=float, default=0.0,
        help="share of repair demonstrations (`turnrl data code_sft --retry-fraction`): a sibling "
        "problem's program first, its wrong output read, then the right program",
    )  # fmt: skip
    ap.add_argument("--sft-epochs", type=int, default=1)
    ap.add_argument("--sft-lr", type=float, default=1e-4)
    ap.add_argument("--sft-batch", type=int, default=8, help="SFT demonstrations per optimizer step")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N for SFT and SFT then RL")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse the stages a run in --out finished with the same commands",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0 = torch's default)")
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="smoke-run sizes: " + ", ".join(f"{k}={v}" for k, v in TINY.items()),
    )
    a = ap.parse_args()
    if a.tiny:
        for key, value in TINY.items():
            setattr(a, key, value)
    if a.demo_problems == "half":
        a.demo_problems = HALF
    return a


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    a = parse()
    out = Path(a.out or f"runs/code_agent-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if out.exists() and any(out.iterdir()) and not a.resume:
        sys.exit(f"--out {out} is not empty (--resume reuses what it holds)")
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model {a.model}; out {out}"
    )
    stages = Stages(out, a.resume)
    val = validation_rows(a.val_prompts, out)
    results: dict[str, list[dict[str, Any]]] = {"best constant output": [best_constant(val)]}

    def record(name: str, got: dict[str, float], train_s: float, run_dir: Path | None) -> None:
        """`train_s`: the processes before the measuring one (data, SFT); the measuring process's
        wall time less its validation pass is training too (RL), or start-up (eval)."""
        wall = train_s + got["wall_s"]
        got = {
            **got,
            "wall_s": wall,
            "train_s": wall - got["eval_s"] if run_dir else 0.0,
            "run_dir": str(run_dir) if run_dir else None,
            "report": report(run_dir) if run_dir else None,
        }
        results.setdefault(name, []).append(got)
        print(
            f"  {name}: held-out pass rate {got['pass_rate']:.3f} (new problems "
            f"{got['pass_rate/new_problem']:.3f}, new families {got['pass_rate/new_family']:.3f}), "
            f"validation {got['eval_s']:.0f} s, wall {got['wall_s']:.0f} s",
            flush=True,
        )

    record("untrained", evaluate(a, stages, a.model, out / "eval_untrained", val, 1), 0.0, None)
    for seed in range(1, a.seeds + 1):
        demos, sft_dir = out / f"demos_s{seed}", out / f"sft_s{seed}"
        only = ["--problems", a.demo_problems] if a.demo_problems else []
        only += ["--retry-fraction", str(a.retry_fraction)] if a.retry_fraction else []
        data_s = stages.run(
            demos.name, demos / "train.jsonl",
            ["data", "code_sft", "--out", str(demos), "--n", str(a.demos), "--seed", str(seed), *only],
            out / f"demos_s{seed}.log",
        )  # fmt: skip
        args = sft_args(a, demos / "train.jsonl", sft_dir, seed, max_obs_length=256)  # code_agent's
        sft_s = stages.run(sft_dir.name, sft_dir / "model", args, out / f"sft_s{seed}.log")
        model = str(sft_dir / "model")
        record(
            "SFT", evaluate(a, stages, model, out / f"eval_sft_s{seed}", val, seed), data_s + sft_s, sft_dir
        )
        run = out / f"sft_rl_s{seed}"
        record("SFT + RL", rl(a, stages, model, run, val, seed), data_s + sft_s, run)

    shown = f"; demonstrated: {a.demo_problems}" if a.demo_problems else ""
    print(
        f"\ncode agent: {a.model}; {a.seeds} seeds; SFT {a.demos} demonstrations x {a.sft_epochs} epochs, "
        f"lr {a.sft_lr}{shown}; RL {a.steps} steps x {a.batch} prompts x {a.n} samples, "
        f"response {a.response_length} tokens"
    )
    cols = (
        "pass_rate/new_problem",
        "pass_rate/new_family",
        "pass_rate",
        "score",
        "formatted",
        "train_s",
        "wall_s",
    )
    print(f"{'condition':<21}" + "".join(f"{c.split('/')[-1]:>22}" for c in cols))
    for name, runs in results.items():
        cells = [spread([r[c] for r in runs]) if all(c in r for r in runs) else "-" for c in cols]
        print(f"{name:<21}" + "".join(f"{c:>22}" for c in cells))
    print(
        "pass rates: fraction of hidden tests passed, greedy, on new problems of the training families, "
        "on the held-out families, and on both; score: 0.1 x runs + 0.9 x pass; formatted: answers "
        "holding a program; wall_s: every process of the condition (start-ups, data, SFT, RL, "
        "validation); train_s: wall_s less the validation pass; mean (min-max) over seeds"
    )
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    path = out / "code_agent.json"
    path.write_text(
        json.dumps({"settings": vars(a), "machine": machine, "results": results}, indent=1) + "\n"
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
