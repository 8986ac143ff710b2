"""Cold start for the search agent: does SFT on scripted demonstrations help RL? Four conditions.

    python benchmarks/cold_start.py                                  # embedded SmolLM2-135M, sized for ~1 h on 2 cores
    python benchmarks/cold_start.py --steps 15 --demos 600 --out runs/cold_start
    python benchmarks/cold_start.py --model tiny-random --tiny       # smoke run (~2 min, scores are 0)

Every stage is the real CLI in a child process, one after the other:

    untrained    turnrl eval search_agent model.path=MODEL
    SFT          turnrl data search_sft, turnrl sft on its demonstrations, turnrl eval of <sft>/model
    RL           turnrl train search_agent model.path=MODEL                (its final validation)
    SFT + RL     turnrl train search_agent model.path=<sft>/model          (the same RL config)

Validation is the task's 128 held-out questions, greedy, exact match (`val/test_score/mean` of a
training run's final validation, `greedy_score` of `turnrl eval`: the same pass, docs/eval.md); the
demonstrations come from training questions only. Each condition's wall time is split into training
(data + SFT and/or RL) and evaluation. `turnrl report` plots each run directory. The table is printed
and written with the settings to `<out>/cold_start.json`.

CPU sizing (defaults): RL 8 prompts x 4 samples, 8 steps, at most 2 tool turns, no KL term (no
reference forward); SFT 256 demonstrations, one epoch, 8 per step, at lr 1e-4; one passage per search
(`--topk 1`: BM25 ranks the entity's own document first for every training question), so that a
one-search episode takes 104-160 tokens of the 192-token response budget (with 3 passages it takes
190-270: invented names tokenise long). Demonstrations have one search (`--retry-fraction 0`). On a
2-core CPU a training token costs ~10 ms forward + backward, which is what bounds these sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TINY = {  # a smoke run: every stage and file, in about two minutes
    "steps": 1,
    "batch": 2,
    "n": 2,
    "response_length": 32,
    "demos": 8,
    "sft_epochs": 1,
    "sft_batch": 8,
    "max_turns": 1,
    "val_prompts": 8,
}


def cli(args: list[str], log: Path) -> float:
    """Run `turnrl ARGS` (this interpreter's turnrl); its output goes to `log`. Returns wall seconds."""
    cmd = [sys.executable, "-m", "turnrl.cli", *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write(shlex.join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "TQDM_DISABLE": "1"}
        )
    wall = time.perf_counter() - start
    if done.returncode:
        tail = log.read_text().splitlines()[-30:]
        sys.exit(f"failed ({done.returncode}): {shlex.join(cmd)}\n" + "\n".join(tail))
    return wall


def common(a: argparse.Namespace, val_file: Path | None) -> list[str]:
    """What the evaluations and both RL runs share: the task, budgets, sampling and validation."""
    return [
        "search_agent",
        *([f"data.val_files=[{val_file}]"] if val_file else []),  # else the task's 128 questions
        f"data.max_response_length={a.response_length}",
        f"data.val_batch_size={a.val_batch}",
        # one engine call per validation batch or RL rollout (the engine cuts its calls to this size)
        f"rollout.generation_batch_size={max(a.val_batch, a.batch * a.n)}",
        f"rollout.multi_turn.max_turns={a.max_turns}",
        f"rollout.multi_turn.search.topk={a.topk}",
        f"trainer.seed={a.seed}",
        f"trainer.num_threads={a.threads}",
    ]


def rl_args(a: argparse.Namespace, model: str, run_dir: Path, val_file: Path | None) -> list[str]:
    return [
        "train",
        *common(a, val_file),
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


def evaluate(
    a: argparse.Namespace, model: str, out: Path, val_file: Path | None
) -> tuple[float, float, float]:
    """`turnrl eval` on the validation questions: (greedy exact match, seconds of the greedy pass,
    wall seconds of the process, start-up included)."""
    args = ["eval", *common(a, val_file), f"model.path={model}", "eval.n=0", "--out", str(out)]
    wall = cli(args, out.with_suffix(".log"))
    summary = json.loads((out / "summary.json").read_text())
    greedy = summary["passes"]["greedy"]["seconds"]
    return float(summary["metrics"]["overall"]["greedy_score"]), float(greedy), wall


def rl(a: argparse.Namespace, model: str, run_dir: Path, val_file: Path | None) -> tuple[float, float, float]:
    """One RL run: (final validation exact match, seconds of that validation, wall seconds)."""
    wall = cli(rl_args(a, model, run_dir, val_file), run_dir.with_suffix(".log"))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in rows if "val/test_score/mean" in r][-1]
    return float(final["val/test_score/mean"]), float(final.get("timing_s/validate", 0.0)), wall


def validation_subset(k: int, out: Path) -> Path | None:
    """The first `k` of the task's validation questions as a file (None: all of them, the task's own)."""
    if not k:
        return None
    from turnrl.tasks import write_task

    val = write_task("search", out / "task", 0).val
    path = out / f"val_{k}.jsonl"
    path.write_text("".join(val.read_text().splitlines(keepends=True)[:k]))
    return path


def report(run_dir: Path) -> str:
    cli(["report", str(run_dir)], run_dir.with_name(run_dir.name + "_report.log"))
    return str(run_dir / "report" / "report.html")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model.path of the untrained model")
    ap.add_argument("--out", default="", help="output directory (default runs/cold_start-<time>)")
    ap.add_argument("--steps", type=int, default=8, help="RL steps")
    ap.add_argument("--batch", type=int, default=8, help="RL prompts per step")
    ap.add_argument("--n", type=int, default=4, help="RL samples per prompt")
    ap.add_argument("--rl-lr", type=float, default=1e-5, help="RL actor learning rate")
    ap.add_argument("--response-length", type=int, default=192, help="tokens of a whole episode's response")
    ap.add_argument("--max-turns", type=int, default=2, help="tool turns per episode")
    ap.add_argument("--topk", type=int, default=1, help="passages per search (demonstrations and RL alike)")
    ap.add_argument("--val-batch", type=int, default=128, help="validation prompts per generation call")
    ap.add_argument(
        "--val-prompts", type=int, default=0, help="validate on the first K questions (0 = all 128)"
    )
    ap.add_argument("--demos", type=int, default=256, help="SFT demonstrations")
    ap.add_argument("--retry-fraction", type=float, default=0.0, help="demonstrations with a second search")
    ap.add_argument("--sft-epochs", type=int, default=1)
    ap.add_argument("--sft-lr", type=float, default=1e-4)
    ap.add_argument("--sft-batch", type=int, default=8, help="SFT demonstrations per optimizer step")
    ap.add_argument("--seed", type=int, default=1)
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
    out = Path(a.out or f"runs/cold_start-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"--out {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model {a.model}; out {out}"
    )
    results: dict[str, dict[str, Any]] = {}
    val = validation_subset(a.val_prompts, out)

    def record(name: str, em: float, eval_s: float, wall_s: float, run_dir: Path | None) -> None:
        """`eval_s`: the validation pass; `wall_s`: every process of the condition (start-ups, data,
        SFT, RL, evaluation); training is the rest."""
        results[name] = {
            "val_em": em,
            "train_s": wall_s - eval_s if run_dir else 0.0,
            "eval_s": eval_s,
            "wall_s": wall_s,
            "run_dir": str(run_dir) if run_dir else None,
            "report": report(run_dir) if run_dir else None,
        }
        print(f"  {name}: val EM {em:.3f}, validation {eval_s:.0f} s, wall {wall_s:.0f} s", flush=True)

    em, eval_s, wall = evaluate(a, a.model, out / "eval_untrained", val)
    record("untrained", em, eval_s, wall, None)

    demos = out / "demos"
    data_s = cli(
        ["data", "search_sft", "--out", str(demos), "--n", str(a.demos), "--seed", str(a.seed),
         "--topk", str(a.topk), "--retry-fraction", str(a.retry_fraction)],
        out / "demos.log",
    )  # fmt: skip
    sft_dir = out / "sft"
    sft_s = cli(
        ["sft", f"model.path={a.model}", f"data.train_files=[{demos / 'train.jsonl'}]",
         "data.max_obs_length=500",  # the search_agent recipe's rollout.multi_turn.max_obs_length
         f"trainer.total_epochs={a.sft_epochs}", f"trainer.train_batch_size={a.sft_batch}",
         "trainer.micro_batch_size=4", f"optim.lr={a.sft_lr}", f"trainer.seed={a.seed}",
         f"trainer.num_threads={a.threads}", "trainer.logger=[jsonl]", f"trainer.default_local_dir={sft_dir}"],
        out / "sft.log",
    )  # fmt: skip
    em, eval_s, wall = evaluate(a, str(sft_dir / "model"), out / "eval_sft", val)
    record("SFT", em, eval_s, data_s + sft_s + wall, sft_dir)

    em, eval_s, wall = rl(a, a.model, out / "rl", val)
    record("RL", em, eval_s, wall, out / "rl")

    em, eval_s, wall = rl(a, str(sft_dir / "model"), out / "sft_rl", val)
    record("SFT + RL", em, eval_s, data_s + sft_s + wall, out / "sft_rl")

    print(
        f"\nsearch agent cold start: {a.model}; RL {a.steps} steps x {a.batch} prompts x {a.n} samples, "
        f"response {a.response_length} tokens; SFT {a.demos} demonstrations x {a.sft_epochs} epochs, lr {a.sft_lr}"
    )
    print(f"{'condition':<10} {'val EM':>7} {'train s':>8} {'val s':>6} {'wall s':>7}")
    for name, r in results.items():
        print(f"{name:<10} {r['val_em']:>7.3f} {r['train_s']:>8.0f} {r['eval_s']:>6.0f} {r['wall_s']:>7.0f}")
    print(
        "val EM: exact match, greedy, on the validation questions; val s: that pass; wall s: every process "
        "of the condition (start-ups, data, SFT, RL, validation); train s: wall s - val s"
    )
    settings = {k: v for k, v in vars(a).items()}
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    path = out / "cold_start.json"
    path.write_text(
        json.dumps({"settings": settings, "machine": machine, "results": results}, indent=1) + "\n"
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
