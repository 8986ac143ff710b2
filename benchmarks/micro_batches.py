"""Fixed-size vs token-budget micro-batches (`actor.use_dynamic_bsz`) on responses of mixed length.

    python benchmarks/micro_batches.py [--model smollm2-135m-instruct] [--rows 32] [--min 8] [--max 256]

One batch of `--rows` responses (groups of `--n` per prompt, the default task's prompts) with
lengths drawn uniformly from [--min, --max], as a long-reasoning or agent task produces. Side by
side on the same actor and batch: the log-prob pass and one update (forward + backward, no
optimizer step), with `--micro` rows per pass vs a budget of `--budget` padded tokens. Prints the
padded tokens each way (what the passes compute), the times, and the ratio; both give the same
gradient (tests/unit/test_dynamic_bsz.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import torch

from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig, ModelConfig, OptimConfig, RolloutConfig
from turnrl.rollout.base import Generation, assemble
from turnrl.tasks import write_task
from turnrl.tensors import left_pad
from turnrl.workers.actor import Actor
from turnrl.workers.microbatch import row_lengths, split_rows


def make_batch(actor: Actor, rows: int, n: int, lo: int, hi: int, seed: int) -> Batch:
    tok = actor.tokenizer
    train = write_task("addition", tempfile.mkdtemp(prefix="turnrl-bench-"), seed).train
    rows_json = [json.loads(line) for line in train.read_text().splitlines()[: rows // n]]
    prompts = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows_json
    ]
    ids, mask = left_pad([tok(p, add_special_tokens=False)["input_ids"] for p in prompts], tok.pad_token_id)
    g = np.random.default_rng(seed)
    responses = [g.integers(100, 40000, int(g.integers(lo, hi + 1))).tolist() for _ in range(rows)]
    gen = Generation(responses, [[0.0] * len(r) for r in responses], ["length"] * rows)
    out = assemble(Batch(tensors={"input_ids": ids, "attention_mask": mask}), gen, n, tok.pad_token_id, hi)
    out["uid"] = np.repeat(np.arange(rows // n), n).astype(object)
    out["advantages"] = (
        torch.from_numpy(g.standard_normal((rows, 1)).astype("float32")) * out["response_mask"]
    )
    return out


def padded_tokens(parts: list[Batch]) -> int:
    total = 0
    for p in parts:
        prompt, response = row_lengths(p)
        total += len(p) * (int(prompt.max()) + int(response.max()))
    return total


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--min", type=int, default=8)
    ap.add_argument("--max", type=int, default=256)
    ap.add_argument("--micro", type=int, default=8, help="rows per pass, fixed")
    ap.add_argument(
        "--budget",
        type=int,
        default=0,
        help="padded tokens per pass (0: what --micro rows of mean length take)",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    model = ModelConfig(path=args.model)
    fixed_cfg = ActorConfig(
        optim=OptimConfig(lr=0.0),
        ppo_mini_batch_size=args.rows // args.n,
        ppo_micro_batch_size=args.micro,
        log_prob_micro_batch_size=args.micro,
    )
    actor = Actor(fixed_cfg, model, RolloutConfig(n=args.n), seed=args.seed)
    batch = make_batch(actor, args.rows, args.n, args.min, args.max, args.seed)
    prompt, response = row_lengths(batch)
    budget = args.budget or int(args.micro * float((prompt + response).float().mean()))
    budget = max(budget, int((prompt + response).max()))
    dynamic_cfg = ActorConfig(
        **{
            **fixed_cfg.__dict__,
            "use_dynamic_bsz": True,
            "ppo_max_token_len_per_gpu": budget,
            "log_prob_max_token_len_per_gpu": budget,
        }
    )
    actor.optim.step = lambda finite=True: {"actor/grad_norm": 0.0}  # time forward + backward only
    real = int((prompt + response).sum())
    print(
        f"model={args.model} rows={args.rows} n={args.n} response lengths {args.min}-{args.max} "
        f"threads={torch.get_num_threads()} real tokens={real}"
    )
    results = {}
    for name, cfg, parts in (
        (f"fixed {args.micro} rows", fixed_cfg, split_rows(batch, args.micro)[0]),
        (f"budget {budget} tokens", dynamic_cfg, split_rows(batch, 0, budget, "budget")[0]),
    ):
        actor.cfg = cfg
        batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]  # warm-up, and the ratio's base
        lp = min(timed(lambda: actor.compute_log_prob(batch)) for _ in range(args.repeats))
        upd = min(timed(lambda: actor.update(batch, step=0)) for _ in range(args.repeats))
        pad = padded_tokens(parts)
        results[name] = (lp, upd)
        print(
            f"{name:24s} passes {len(parts):3d}  padded tokens {pad:7d} ({pad / real:.2f}x real)  "
            f"log-prob {lp:6.2f}s  update fwd+bwd {upd:6.2f}s"
        )
    (lp0, up0), (lp1, up1) = results.values()
    print(f"budget vs fixed: log-prob x{lp0 / lp1:.2f}  update x{up0 / up1:.2f}")


if __name__ == "__main__":
    main()
