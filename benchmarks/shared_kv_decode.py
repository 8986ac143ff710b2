"""What reading the shared prefix's keys and values once saves a decode (`rollout/attention.py`,
`SHARED_KV`): the same `HFEngine.generate` call with every row's copy read, then with the shared
positions read from the first row, in turns, in one process; prints each call's prefill and decode
seconds, the decode ratio, and whether the greedy ids agree.

    python benchmarks/shared_kv_decode.py                                  # 48 rows, 220 shared + 200 own tokens
    python benchmarks/shared_kv_decode.py --rows 12 --shared 220 --own 300 # an RL step's width
    python benchmarks/shared_kv_decode.py --model tiny-random --rows 4 --new 4   # a smoke run

The prompts are random token ids (speed does not depend on them): `--shared` the same in every row,
then `--own` of each row's; `--new` greedy tokens with EOS ignored, so both arms decode the same
steps. Numbers: docs/rollout.md, "Prefixes prefilled once"."""

from __future__ import annotations

import argparse
import statistics

import torch
from _cli import cpu_name

import turnrl.rollout.hf as hf
from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--shared", type=int, default=220, help="tokens every prompt starts with")
    ap.add_argument("--own", type=int, default=200, help="tokens of each row's own after them")
    ap.add_argument("--new", type=int, default=48, help="tokens decoded per row")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model, torch.device("cpu"), seed=0)
    model.float()
    g = torch.Generator().manual_seed(0)
    vocab = min(40_000, model.config.vocab_size)
    head = torch.randint(100, vocab, (a.shared,), generator=g).tolist()
    prompts = [head + torch.randint(100, vocab, (a.own,), generator=g).tolist() for _ in range(a.rows)]
    params = SamplingParams(max_new_tokens=a.new, temperature=0.0, ignore_eos=True)
    reads_once = hf.reads_shared_kv
    arms = {"every row's copy": lambda model: False, "shared read once": reads_once}
    decode: dict[str, list[float]] = {name: [] for name in arms}
    ids: dict[str, list[list[int]]] = {}
    print(
        f"{cpu_name()}, {a.threads} thread(s), {a.rows} rows, {a.shared} shared + {a.own} own tokens, {a.new} new"
    )
    for turn in range(a.repeats):
        for name, switch in arms.items():
            hf.reads_shared_kv = switch  # type: ignore[assignment]
            engine = hf.HFEngine(model, tok, batch_size=a.rows)
            out = engine.generate(prompts, params)
            work = engine.work.take()
            decode[name].append(work["engine/decode_s"])
            ids[name] = out.response_ids
            print(
                f"  {turn}  {name:18s} prefill {work['engine/prefill_s']:7.2f} s  decode {work['engine/decode_s']:7.2f} s"
            )
    hf.reads_shared_kv = reads_once  # type: ignore[assignment]
    plain, once = (statistics.median(decode[n]) for n in arms)
    print(f"decode, median: {plain:.2f} s against {once:.2f} s: {plain / once:.2f}x")
    print("greedy ids the same:", ids["every row's copy"] == ids["shared read once"])


if __name__ == "__main__":
    main()
