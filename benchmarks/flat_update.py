"""What leaving flat responses out of the update saves (`actor.skip_flat_responses`): the same
`Actor.update` on the same batch from the same weights, every response run, then the flat ones left
out, in turns, in one process; for each share of flat groups prints both updates' seconds, the
ratio, and how far apart the two updates leave the weights (Adam makes a step of about lr whatever
the gradient's scale, so a difference near lr would mean a wrong gradient; rounding leaves far less).

    python benchmarks/flat_update.py                          # 4 groups x 4 responses, 64 + 128 tokens
    python benchmarks/flat_update.py --groups 4 --n 4 --prompt 260 --response 650   # a coding-agent RL step
    python benchmarks/flat_update.py --model tiny-random --response 8 --repeats 1  # a smoke run

The responses are random token ids (speed does not depend on them); a flat group's advantages are
0, the others' +1 / -1 alternately. Numbers: docs/results/speed-cpu.md, "Flat responses"."""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch
from _cli import cpu_name

from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig, ModelConfig, OptimConfig, RolloutConfig
from turnrl.rollout.base import Generation, assemble
from turnrl.workers.actor import Actor


def batch_of(actor: Actor, a: argparse.Namespace, flat_groups: int) -> Batch:
    """`--groups` prompts x `--n` responses of `--response` random tokens; the first `flat_groups`
    groups' advantages 0."""
    g = torch.Generator().manual_seed(0)
    vocab = min(40_000, actor.model.config.vocab_size)
    prompts = torch.randint(100, vocab, (a.groups, a.prompt), generator=g)
    rows = a.groups * a.n
    responses = torch.randint(100, vocab, (rows, a.response), generator=g).tolist()
    out = assemble(
        Batch(tensors={"input_ids": prompts, "attention_mask": torch.ones_like(prompts)}),
        Generation(responses, [[0.0] * a.response] * rows, ["length"] * rows),
        a.n,
        actor.tokenizer.pad_token_id,
        a.response,
    )
    out["uid"] = np.array([f"g{i // a.n}" for i in range(rows)], dtype=object)
    sign = torch.tensor([1.0 if i % 2 else -1.0 for i in range(rows)])
    sign[: flat_groups * a.n] = 0.0
    out["advantages"] = sign[:, None] * out["response_mask"]
    out["old_log_probs"] = actor.compute_log_prob(out)["log_probs"]
    return out


def timed_update(actor: Actor, start: dict, batch: Batch, skip: bool) -> tuple[float, list[torch.Tensor]]:
    actor.model.load_state_dict(start)
    actor.optim = type(actor.optim)(actor.model, actor.cfg.optim, name="actor")  # fresh moments
    actor.cfg.skip_flat_responses = skip
    t = time.perf_counter()
    actor.update(batch, step=0)
    return time.perf_counter() - t, [p.detach().clone() for p in actor.model.parameters()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="responses a group")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=128)
    ap.add_argument("--flat", default="0,2,3", help="flat groups, comma-separated: one measurement each")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lr = 1e-5
    cfg = ActorConfig(
        optim=OptimConfig(lr=lr), ppo_mini_batch_size=a.groups, ppo_micro_batch_size=a.n
    )  # one optimizer step, a group per pass
    actor = Actor(cfg, ModelConfig(path=a.model), RolloutConfig(n=a.n), seed=0)
    start = copy.deepcopy(actor.model.state_dict())
    print(
        f"{cpu_name()}, {a.threads} thread(s), {a.model}, {a.groups} groups x {a.n} responses of "
        f"{a.prompt} + {a.response} tokens, one optimizer step (lr {lr:g})"
    )
    timed_update(actor, start, batch_of(actor, a, 0), False)  # warm-up: the first pass pays for allocations
    print("flat groups | every response s | flat left out s | speed-up | max |weight difference|")
    for flat in (int(x) for x in a.flat.split(",")):
        batch = batch_of(actor, a, flat)
        secs: dict[bool, list[float]] = {False: [], True: []}
        weights: dict[bool, list[torch.Tensor]] = {}
        for _ in range(a.repeats):
            for skip in (False, True):
                s, weights[skip] = timed_update(actor, start, batch, skip)
                secs[skip].append(s)
        diff = max((x - y).abs().max().item() for x, y in zip(weights[False], weights[True], strict=True))
        every, left = statistics.median(secs[False]), statistics.median(secs[True])
        print(f"{flat} of {a.groups} | {every:.2f} | {left:.2f} | {every / left:.2f}x | {diff:.1e}")


if __name__ == "__main__":
    main()
