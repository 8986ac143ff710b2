"""What copying the prompt's keys and values out of the preallocated cache once saves a bfloat16 decode
(`rollout/kv_cache.py`, `freeze`; `rollout/attention.py`, `FROZEN_KV`): the same `HFEngine.generate`
call with the decode attention reading the cache's strided view at every step (which torch's CPU
product in bfloat16 copies whole), then reading the frozen copy, in turns, in one process; prints
each call's decode seconds, the ratio, and how many rows' ids agree.

    python benchmarks/frozen_kv.py                                          # 48 rows as an agent turn
    python benchmarks/frozen_kv.py --dtype float32                          # float32 (not frozen by default)
    python benchmarks/frozen_kv.py --model tiny-random --rows 8 --own 8 --new 8   # a smoke run

The prompts are random token ids (speed does not depend on them): `--shared` the same in every row
(a system prompt, read once), then `--own` of each row's (the episode so far), then `--new` greedy
tokens a row with EOS ignored."""

from __future__ import annotations

import argparse
import statistics

import torch
from _cli import cpu_name

import turnrl.rollout.hf as hf
from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bfloat16", help="the sampling copy's dtype")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--shared", type=int, default=250, help="tokens every prompt starts with")
    ap.add_argument("--own", type=int, default=290, help="tokens of each row's own after them")
    ap.add_argument("--new", type=int, default=64, help="tokens sampled a row")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model, torch.device("cpu"), seed=0)
    model.to(getattr(torch, a.dtype))
    g = torch.Generator().manual_seed(0)
    vocab = min(40_000, model.config.vocab_size)
    head = torch.randint(100, vocab, (a.shared,), generator=g).tolist()
    prompts = [head + torch.randint(100, vocab, (a.own,), generator=g).tolist() for _ in range(a.rows)]
    params = SamplingParams(max_new_tokens=a.new, temperature=0.0, ignore_eos=True)
    pays = hf.freeze_pays
    arms = {"strided view": lambda cache: False, "frozen copy": lambda cache: True}
    decode: dict[str, list[float]] = {name: [] for name in arms}
    ids: dict[str, list[list[int]]] = {}
    print(
        f"{cpu_name()}, {a.threads} thread(s), {a.dtype}, {a.rows} rows, {a.shared} shared + {a.own} own tokens"
    )
    try:
        for turn in range(a.repeats):
            for name, rule in arms.items():
                hf.freeze_pays = rule  # type: ignore[assignment]
                engine = HFEngine(model, tok, batch_size=a.rows)
                out = engine.generate(prompts, params)
                work = engine.work.take()
                decode[name].append(work["engine/decode_s"])
                ids[name] = out.response_ids
                per_step = 1000 * work["engine/decode_s"] / max(1, work["engine/decode_steps"])
                print(
                    f"  {turn}  {name:13s} decode {work['engine/decode_s']:7.2f} s ({per_step:.0f} ms a step)"
                )
    finally:
        hf.freeze_pays = pays  # type: ignore[assignment]
    before, after = (statistics.median(decode[n]) for n in arms)
    print(f"decode, median: {before:.2f} s against {after:.2f} s: {before / after:.2f}x")
    agree = sum(x == y for x, y in zip(ids["strided view"], ids["frozen copy"], strict=True))
    print(f"rows with the same greedy ids: {agree} of {a.rows}")


if __name__ == "__main__":
    main()
