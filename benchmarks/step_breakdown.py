"""Time per stage and tokens/s for a few steps of the default recipe, plus two side-by-side ratios.

    python benchmarks/step_breakdown.py [--steps 3] [key=value overrides]

1. The step: each stage's mean wall time over `--steps` steps (the first, warm-up step is
   reported separately) and throughput in tokens/s.
2. Rollout: turnrl's engine (prefill once per prompt, KV cache copied to its n samples) vs
   transformers' `model.generate` on the same prompts and lengths.
3. Trainer forward+backward: prefix-shared vs plain forward on the same micro-batch.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    run_dir = tempfile.mkdtemp(prefix="turnrl-bench-")
    cfg = load_config(
        None, [f"trainer.default_local_dir={run_dir}", "trainer.logger=[jsonl]", *args.overrides]
    )
    trainer = Trainer(cfg)
    print(
        f"model={cfg.model.path} prompts/step={cfg.data.train_batch_size} n={cfg.rollout.n} "
        f"max_response_length={cfg.data.max_response_length} threads={torch.get_num_threads()}"
    )

    batches = trainer.loader.epoch_batches()
    per_step = []
    for _ in range(args.steps + 1):
        trainer.global_step += 1  # as fit() numbers its steps (step 0 would be critic warm-up)
        per_step.append(trainer.step(next(batches)))
    warm, rest = per_step[0], per_step[1:]
    keys = [k for k in rest[0] if k.startswith("timing_s/")]
    print("\n== one training step (mean over steps after the first) ==")
    print(f"{'stage':28s} {'seconds':>9s} {'share':>7s} {'first step':>11s}")
    total = statistics.mean(r["timing_s/step"] for r in rest)
    for k in keys:
        mean = statistics.mean(r[k] for r in rest)
        print(f"{k[9:]:28s} {mean:9.2f} {mean / total:7.1%} {warm[k]:11.2f}")
    print(
        f"tokens/step {statistics.mean(r['perf/total_num_tokens'] for r in rest):.0f}   "
        f"throughput {statistics.mean(r['perf/throughput'] for r in rest):.1f} tokens/s"
    )

    # rollout: our engine vs model.generate, same prompts, lengths and sampling
    prompts = next(batches)
    gen_batch = stages.split_generation_input(prompts)
    ids = [
        row[m.bool()].tolist()
        for row, m in zip(gen_batch["input_ids"], gen_batch["attention_mask"], strict=True)
    ]
    params = SamplingParams(
        max_new_tokens=cfg.data.max_response_length, n=cfg.rollout.n, temperature=1.0, seed=0
    )
    ours = best_of(lambda: trainer.engine.generate(ids, params), 2)
    model = trainer.model
    enc = {k: gen_batch[k].to(trainer.device) for k in ("input_ids", "attention_mask")}

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
    batch = stages.group_and_merge(
        prompts,
        stages.generate(trainer.rollout, gen_batch, params, trainer.pad_id, cfg.data.max_response_length)[0],
        cfg.rollout.n,
    )
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


if __name__ == "__main__":
    main()
