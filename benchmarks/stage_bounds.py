"""Where a run's steps spent their time, stage by stage, against the machine's bounds.

    python benchmarks/stage_bounds.py RUN_DIR [--skip 1] [--threads N] [--dtype float32] [--rates GFLOPS,GBPS]

Reads `RUN_DIR/metrics.jsonl` (the steps' `timing_s/*`, and `engine/*` from turnrl's own engine:
prefill and decode split out of generation) and `RUN_DIR/config.yaml` (the model, the update's
passes), measures this machine's matmul rate (a 1024-cube product) and copy bandwidth at the
run's thread count, and prints per stage its mean wall time over the steps after the first
`--skip` (warm-up), its share of the step, and how close it ran to its bound
(`turnrl/trainer/bounds.py`: prefill and the passes over the batch at the matmul rate, decode at
the larger of bandwidth and matmul rate). Run it on the machine that ran the steps, in the same
conditions (the rates are measured now).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
from rollout_speed import copy_bandwidth, matmul_roofline

from turnrl.models.loader import TINY, load_tokenizer, model_directory, tiny_random_config
from turnrl.trainer.bounds import ModelShape, Rates, stage_table


def model_shape(cfg: dict, element_size: int) -> ModelShape:
    """The run's model built on the meta device (no weights read) for its sizes."""
    path, cache = str(cfg["model"]["path"]), cfg["model"].get("cache_dir", "")
    if path == TINY:
        tok = load_tokenizer(path, cache)
        config = tiny_random_config(len(tok), tok)
    else:
        config = AutoConfig.from_pretrained(model_directory(path, cache))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return ModelShape.of(model, element_size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--skip", type=int, default=1, help="leading steps left out (warm-up)")
    ap.add_argument("--threads", type=int, default=0, help="0: the run's trainer.num_threads")
    ap.add_argument("--dtype", default="float32", help="the precision the stages computed in")
    ap.add_argument("--repeats", type=int, default=20, help="the rates are the best of this many tries")
    ap.add_argument("--rates", default="", help="GFLOP/s,GB/s measured elsewhere (e.g. idle) instead of now")
    args = ap.parse_args()
    cfg = yaml.safe_load((args.run_dir / "config.yaml").read_text())
    steps = [
        json.loads(line) for line in (args.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    steps = [s for s in steps if "timing_s/step" in s][args.skip :]
    if not steps:
        sys.exit(f"{args.run_dir}/metrics.jsonl: no training step after the first {args.skip}")
    threads = args.threads or int(cfg["trainer"].get("num_threads") or 0) or torch.get_num_threads()
    torch.set_num_threads(threads)
    dtype = getattr(torch, args.dtype)
    device = torch.device("cpu")
    if args.rates:
        flops, bandwidth = (float(x) for x in args.rates.split(","))
        rates = Rates(flops * 1e9, bandwidth * 1e9)
    else:
        rates = Rates(matmul_roofline(device, 1024, dtype, repeats=args.repeats), copy_bandwidth(device))
    shape = model_shape(cfg, torch.empty((), dtype=dtype).element_size())
    actor, recompute = cfg["actor"], bool(cfg["model"].get("gradient_checkpointing"))
    passes = actor.get("ppo_epochs", 1) * (4 / 3 if recompute else 1)
    # the actor runs a prompt once for its samples in one micro-batch, unless layers recompute
    prompt_share = 1 if recompute else min(cfg["rollout"]["n"], actor.get("ppo_micro_batch_size", 1))
    print(
        f"{args.run_dir}: {len(steps)} steps after {args.skip}; {platform.processor() or platform.machine()}, "
        f"{threads} threads, {args.dtype}: matmul {rates.matmul_flops / 1e9:.1f} GFLOP/s, copy "
        f"{rates.bandwidth / 1e9:.1f} GB/s; model {shape.trunk_params / 1e6:.0f}M trunk + "
        f"{shape.head_params / 1e6:.0f}M head weights"
    )
    print("| stage | wall s (mean) | share of the step | share of its bound |\n|---|---|---|---|")
    for stage, wall, share, bound in stage_table(steps, shape, rates, passes, prompt_share):
        cell = f"{100 * bound:.0f} %" if bound is not None else ""
        print(f"| {stage} | {wall:.2f} | {100 * share:.0f} % | {cell} |")
    m = steps[-1]
    if "engine/decode_steps" in m:
        print(
            f"last step: prefill {m['engine/prefill_tokens']:.0f} positions ({m['engine/prefill_new_tokens']:.0f} real), "
            f"decode {m['engine/decode_steps']:.0f} steps of {m['engine/decode_rows'] / max(m['engine/decode_steps'], 1):.1f} rows"
        )


if __name__ == "__main__":
    main()
