"""Time per stage and tokens/s for a few steps of the default recipe, plus two side-by-side ratios.

    python benchmarks/step_breakdown.py [--steps 3] [--before "k=v k=v"] [key=value overrides]

1. The step: each stage's mean wall time over `--steps` steps (the first, warm-up step is
   reported separately) and throughput in tokens/s. With `--before`, the same steps first run
   with those overrides added (e.g. the settings before a change), and the table shows both
   columns and their ratio, measured one after the other in this process.
2. Rollout: turnrl's engine (prefill once per prompt, KV cache copied to its n samples) vs
   transformers' `model.generate` on the same prompts and lengths.
3. Trainer forward+backward: prefix-shared vs plain forward on the same micro-batch.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import torch

from turnrl.config import load_config
from turnrl.models.logprobs import response_log_probs, shared_prefix_log_probs
from turnrl.rollout.base import SamplingParams
from turnrl.trainer import stages
from turnrl.trainer.ppo import Trainer


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def make_trainer(overrides: list[str]) -> Trainer:
    run_dir = tempfile.mkdtemp(prefix="turnrl-bench-")
    return Trainer(
        load_config(None, [f"trainer.default_local_dir={run_dir}", "trainer.logger=[jsonl]", *overrides])
    )


def time_steps(trainer: Trainer, steps: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The warm-up step's metrics and those of the `steps` after it."""
    per_step = [trainer.step() for _ in range(steps + 1)]  # the loop of fit(), without its logging
    return per_step[0], per_step[1:]


def stage_ops(events: list[Any]) -> dict[str, dict[str, float]]:
    """Self CPU seconds per op name inside each `stage:<name>` label (trainer/stages.StageClock):
    every op is charged to its innermost enclosing stage, ops outside any stage to `(none)`."""
    out: dict[str, dict[str, float]] = {}
    for e in events:
        if e.name.startswith("stage:"):
            continue
        parent, stage = e.cpu_parent, "(none)"
        while parent is not None:
            if parent.name.startswith("stage:"):
                stage = parent.name[6:]
                break
            parent = parent.cpu_parent
        ops = out.setdefault(stage, {})
        ops[e.name] = ops.get(e.name, 0.0) + e.self_cpu_time_total / 1e6
    return out


def profile_step(trainer: Trainer, top: int) -> None:
    """One more step under torch.profiler; per stage, its wall share and its `top` ops by self time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        metrics = trainer.step()
    per_stage = stage_ops(list(prof.events()))
    step = metrics["timing_s/step"]
    print(
        f"\n== one profiled step ({step:.2f} s with the profiler on): top {top} ops per stage, self time =="
    )
    for stage, ops in sorted(per_stage.items(), key=lambda kv: -sum(kv[1].values())):
        wall = metrics.get(f"timing_s/{stage}", 0.0)
        total = sum(ops.values())
        print(f"-- {stage}: wall {wall:.2f} s ({wall / step:.0%} of the step), ops' self time {total:.2f} s")
        for name, sec in sorted(ops.items(), key=lambda kv: -kv[1])[:top]:
            print(f"   {sec:8.3f} s  {sec / total:6.1%}  {name}")


def mean_of(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.mean(r.get(key, 0.0) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--before", default="", help="overrides added for the 'before' column")
    ap.add_argument("--profile", type=int, default=0, help="then profile one more step: top N ops per stage")
    args = ap.parse_args()
    columns: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []
    if args.before:
        old = make_trainer([*args.overrides, *args.before.split()])
        columns.append(("before", *time_steps(old, args.steps)))
        old.close()
    trainer = make_trainer(args.overrides)
    cfg = trainer.cfg
    print(
        f"model={cfg.model.path} prompts/step={cfg.data.train_batch_size} n={cfg.rollout.n} "
        f"max_response_length={cfg.data.max_response_length} threads={torch.get_num_threads()}"
    )
    columns.append(("after" if args.before else "seconds", *time_steps(trainer, args.steps)))
    print("\n== one training step (mean over steps after the first) ==")
    if args.before:
        print(f"before: {args.before}")
    keys = sorted(
        {k for _, _, rest in columns for k in rest[0] if k.startswith("timing_s/")},
        key=lambda k: (k == "timing_s/step", k),
    )
    heads = "".join(f"{name:>9s} {'share':>7s} " for name, _, _ in columns)
    print(f"{'stage':22s} {heads}{'first step':>11s}" + (f" {'after/before':>13s}" if args.before else ""))
    for k in keys:
        line = f"{k[9:]:22s} "
        for _, _, rest in columns:
            mean = mean_of(rest, k)
            line += f"{mean:9.2f} {mean / mean_of(rest, 'timing_s/step'):7.1%} "
        line += f"{columns[-1][1].get(k, 0.0):11.2f}"
        if args.before:
            b, a = mean_of(columns[0][2], k), mean_of(columns[-1][2], k)
            line += f" {a / b:13.2f}" if b else f" {'-':>13s}"
        print(line)
    for name, _, rest in columns:
        print(
            f"{name}: tokens/step {mean_of(rest, 'perf/total_num_tokens'):.0f}   "
            f"throughput {mean_of(rest, 'perf/throughput'):.1f} tokens/s"
        )
    if args.before:
        b, a = mean_of(columns[0][2], "timing_s/step"), mean_of(columns[-1][2], "timing_s/step")
        print(f"step speed-up after/before: x{b / a:.2f}")
    if args.profile:
        profile_step(trainer, args.profile)

    # rollout: our engine vs model.generate, same prompts, lengths and sampling
    prompts = next(trainer.loader.epoch_batches(), None)
    if prompts is None:  # the steps above ended an epoch: the next one starts
        prompts = next(trainer.loader.epoch_batches())
    gen_batch = stages.split_generation_input(prompts)
    ids = [
        row[m.bool()].tolist()
        for row, m in zip(gen_batch["input_ids"], gen_batch["attention_mask"], strict=True)
    ]
    params = SamplingParams(
        max_new_tokens=cfg.data.max_response_length, n=cfg.rollout.n, temperature=1.0, seed=0
    )
    ours = best_of(lambda: trainer.engine.generate(ids, params), 2)
    actor = trainer.actor.group.workers[0]  # one process: the Actor itself
    model = actor.model
    enc = {k: gen_batch[k].to(actor.device) for k in ("input_ids", "attention_mask")}

    def hf_generate() -> None:
        with torch.no_grad():
            model.generate(
                **enc,
                max_new_tokens=params.max_new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                num_return_sequences=params.n,
                pad_token_id=trainer.pad_id,
            )

    theirs = best_of(hf_generate, 2)
    print("\n== rollout: turnrl engine vs transformers generate (same prompts, n, length) ==")
    print(f"turnrl {ours:.2f}s   generate {theirs:.2f}s   speed-up x{theirs / ours:.2f}")

    # trainer forward+backward on one micro-batch: shared prompt pass vs plain
    batch = stages.group_and_merge(prompts, trainer.rollout.generate(gen_batch, params)[0], cfg.rollout.n)
    mb = batch.index(slice(0, cfg.actor.ppo_micro_batch_size))
    argv = (mb["input_ids"], mb["attention_mask"], mb["position_ids"], mb["responses"].shape[1], 1.0)
    model.train()

    def fwd_bwd(fn) -> None:
        model.zero_grad(set_to_none=True)
        lp, _ = fn(model, *argv)
        (lp * mb["response_mask"]).sum().backward()

    shared = best_of(lambda: fwd_bwd(shared_prefix_log_probs))
    plain = best_of(lambda: fwd_bwd(response_log_probs))
    model.zero_grad(set_to_none=True)
    print(f"\n== forward+backward on {len(mb)} responses: prefix-shared vs plain ==")
    print(f"shared {shared:.2f}s   plain {plain:.2f}s   speed-up x{plain / shared:.2f}")
    trainer.close()


if __name__ == "__main__":
    main()
