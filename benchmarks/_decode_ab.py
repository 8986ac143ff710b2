"""What the decode A/B benchmarks share (`decode_compaction.py`, `shared_kv_decode.py`, `frozen_kv.py`):
their arguments, random prompts (`--shared` tokens every row starts with, then `--own` of each
row's), and the same `HFEngine.generate` call under each arm in turns, in one process, with each
arm's decode seconds, the median ratio of the first arm to the second, and how many rows' ids agree.

An arm is a context manager that switches the engine to one way of decoding and back
(`unittest.mock.patch.object` on the function that decides), so an interrupted run leaves nothing
switched."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from _cli import cpu_name

from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine


def parser(doc: str, *, rows: int, shared: int, own: int, new: int, dtype: str) -> argparse.ArgumentParser:
    """The arguments every decode A/B takes, with this benchmark's defaults."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument(
        "--dtype", default=dtype, help="the sampling copy's dtype (bfloat16 is fast with AVX512-BF16/AMX)"
    )
    ap.add_argument("--rows", type=int, default=rows)
    ap.add_argument("--shared", type=int, default=shared, help="tokens every prompt starts with")
    ap.add_argument("--own", type=int, default=own, help="tokens of each row's own after them")
    ap.add_argument("--new", type=int, default=new, help="the longest row's budget of new tokens")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    return ap


def setup(a: argparse.Namespace) -> tuple[Any, Any, list[list[int]], torch.Generator]:
    """The model in `--dtype`, its tokenizer, the random prompts, and the generator that drew them."""
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model, torch.device("cpu"), seed=0)
    model.to(getattr(torch, a.dtype))
    g = torch.Generator().manual_seed(0)
    vocab = min(40_000, model.config.vocab_size)
    head = torch.randint(100, vocab, (a.shared,), generator=g).tolist()
    prompts = [head + torch.randint(100, vocab, (a.own,), generator=g).tolist() for _ in range(a.rows)]
    print(
        f"{cpu_name()}, {a.threads} thread(s), {a.dtype}, {a.rows} rows, {a.shared} shared + {a.own} own tokens"
    )
    return model, tok, prompts, g


def alternate(
    a: argparse.Namespace,
    model: Any,
    tok: Any,
    prompts: list[list[int]],
    arms: dict[str, Callable[[], AbstractContextManager[Any]]],
    limits: list[int] | None = None,
) -> None:
    """Greedy `generate` (EOS ignored, so both arms decode the same steps) under each arm in turns,
    `--repeats` times; prints each call, the median decode ratio (first arm / second) and the agreement."""
    params = SamplingParams(max_new_tokens=a.new, temperature=0.0, ignore_eos=True)
    decode: dict[str, list[float]] = {name: [] for name in arms}
    ids: dict[str, list[list[int]]] = {}
    width = max(map(len, arms))
    for turn in range(a.repeats):
        for name, arm in arms.items():
            with arm():
                engine = HFEngine(model, tok, batch_size=a.rows)
                out = engine.generate(prompts, params, limits)
            work = engine.work.take()
            decode[name].append(work["engine/decode_s"])
            ids[name] = out.response_ids
            per_step = 1000 * work["engine/decode_s"] / max(1, work["engine/decode_steps"])
            print(
                f"  {turn}  {name:{width}s} prefill {work['engine/prefill_s']:7.2f} s"
                f"  decode {work['engine/decode_s']:7.2f} s ({per_step:.0f} ms a step)"
            )
    first, second = list(arms)[:2]
    before, after = statistics.median(decode[first]), statistics.median(decode[second])
    print(f"decode, median: {before:.2f} s against {after:.2f} s: {before / after:.2f}x")
    agree = sum(x == y for x, y in zip(ids[first], ids[second], strict=True))
    print(f"rows with the same greedy ids: {agree} of {len(prompts)}")
