"""What letting finished rows ride until dropping them pays saves a decode (`rollout/decode_loop.py`,
`compaction_pays`; `rollout/kv_cache.py`, rows kept in place): the same `HFEngine.generate` call with
finished rows dropped at every finish (a whole copy of each layer's cache each time), then with the
current rule, in turns, in one process; prints each call's decode seconds, the ratio, and whether
the ids agree.

    python benchmarks/decode_compaction.py                                 # 64 rows as an agent turn
    python benchmarks/decode_compaction.py --dtype float32                 # the exact float32 copy
    python benchmarks/decode_compaction.py --model tiny-random --rows 8 --own 8 --new 8   # a smoke run

The prompts are random token ids (speed does not depend on them): `--shared` the same in every row
(a system prompt), then `--own` of each row's (the episode so far). Each row gets its own budget,
spread evenly from `--new` / 8 to `--new` tokens with EOS ignored, so rows finish one after another
as an agent turn's answers and tool calls do, and both arms decode the same tokens."""

from __future__ import annotations

import argparse
import statistics

import torch
from _cli import cpu_name

import turnrl.rollout.decode_loop as decode_loop
from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.rollout.kv_cache import PreallocatedLayer


def whole_copy(self: PreallocatedLayer, indices: torch.Tensor) -> None:
    """Dropping rows as before: every kept row's whole buffer gathered into a new one."""
    if self._k is not None and self._v is not None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._refresh()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument(
        "--dtype",
        default="bfloat16",
        help="the sampling copy's dtype (bfloat16 needs AVX512-BF16/AMX to be fast)",
    )
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--shared", type=int, default=250, help="tokens every prompt starts with")
    ap.add_argument("--own", type=int, default=150, help="tokens of each row's own after them")
    ap.add_argument("--new", type=int, default=128, help="the longest row's budget")
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
    low = max(1, a.new // 8)
    limits = [low + (a.new - low) * i // max(1, a.rows - 1) for i in range(a.rows)]
    order = torch.randperm(a.rows, generator=g).tolist()  # finishing order not the row order
    limits = [limits[i] for i in order]
    params = SamplingParams(max_new_tokens=a.new, temperature=0.0, ignore_eos=True)
    rule, select = decode_loop.compaction_pays, PreallocatedLayer.batch_select_indices
    arms = {
        "drop at every finish": (lambda ridden, kept: True, whole_copy),
        "drop when it pays": (rule, select),
    }
    decode: dict[str, list[float]] = {name: [] for name in arms}
    ids: dict[str, list[list[int]]] = {}
    print(
        f"{cpu_name()}, {a.threads} thread(s), {a.dtype}, {a.rows} rows, {a.shared} shared + {a.own} own"
        f" tokens, budgets {low}-{a.new}"
    )
    try:
        for turn in range(a.repeats):
            for name, (pays, drop) in arms.items():
                decode_loop.compaction_pays = pays  # type: ignore[assignment]
                PreallocatedLayer.batch_select_indices = drop  # type: ignore[method-assign]
                engine = HFEngine(model, tok, batch_size=a.rows)
                out = engine.generate(prompts, params, limits)
                work = engine.work.take()
                decode[name].append(work["engine/decode_s"])
                ids[name] = out.response_ids
                print(f"  {turn}  {name:22s} decode {work['engine/decode_s']:7.2f} s")
    finally:
        decode_loop.compaction_pays = rule  # type: ignore[assignment]
        PreallocatedLayer.batch_select_indices = select  # type: ignore[method-assign]
    before, after = (statistics.median(decode[n]) for n in arms)
    print(f"decode, median: {before:.2f} s against {after:.2f} s: {before / after:.2f}x")
    print("greedy ids the same:", ids["drop at every finish"] == ids["drop when it pays"])


if __name__ == "__main__":
    main()
