"""Where a CPU decode step's time goes, part by part (one thread unless `--threads`): the sampler over
the vocabulary, one layer's attention at a decode step, and each matrix product of SmolLM2-135M's
step in fp32 (plain and from a weight packed once for oneDNN), in bf16, and in bf16 packed (as the
bf16 rollout copy runs it). Random inputs of the real shapes (speed does not depend on the values); prints
milliseconds per call and the GEMMs' GFLOP/s. docs/rollout.md reads these numbers.

    python benchmarks/decode_parts.py             # batch 16
    python benchmarks/decode_parts.py --batch 64
    python benchmarks/decode_parts.py --threads 2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

HIDDEN, INTER, VOCAB, HEADS, KV_HEADS, HEAD_DIM = 576, 1536, 49152, 9, 3, 64  # SmolLM2-135M


def ms_per_call(fn: Callable[[], object], n: int = 20) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return 1000 * (time.perf_counter() - t0) / n


def sampler_parts(b: int, g: torch.Generator) -> None:
    probs = torch.softmax(torch.randn(b, VOCAB), -1)

    def inverse_cdf() -> torch.Tensor:  # one uniform per row against the cumulative distribution
        c = probs.cumsum(-1)
        u = torch.rand(b, 1, generator=g) * c[:, -1:]
        return torch.searchsorted(c, u).clamp(max=VOCAB - 1)

    print(
        f"sample, torch.multinomial      {ms_per_call(lambda: torch.multinomial(probs, 1, generator=g)):8.2f} ms"
    )
    print(f"sample, inverse CDF            {ms_per_call(inverse_cdf):8.2f} ms")
    print(f"log_softmax over the vocab     {ms_per_call(lambda: torch.log_softmax(probs, -1)):8.2f} ms")


def attention_parts(b: int, context: int) -> None:
    q = torch.randn(b, HEADS, 1, HEAD_DIM)
    k, v = torch.randn(b, KV_HEADS, context, HEAD_DIM), torch.randn(b, KV_HEADS, context, HEAD_DIM)
    mask = torch.ones(b, 1, 1, context, dtype=torch.bool)

    def grouped() -> torch.Tensor:  # the query heads of one KV head as rows of one product
        qq = q.view(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
        s = torch.matmul(qq, k.transpose(-1, -2)) * HEAD_DIM**-0.5
        return torch.matmul(torch.softmax(s, -1), v)

    sdpa = ms_per_call(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), 200)
    print(f"attention, SDPA (one layer)    {sdpa:8.3f} ms   context {context}")
    print(f"attention, grouped matmuls     {ms_per_call(grouped, 200):8.3f} ms")


def gemm_parts(b: int) -> None:
    shapes = {
        "q/o (576 -> 576)": (HIDDEN, HIDDEN),
        "k or v (576 -> 192)": (HIDDEN, KV_HEADS * HEAD_DIM),
        "gate or up (576 -> 1536)": (HIDDEN, INTER),
        "down (1536 -> 576)": (INTER, HIDDEN),
        "qkv fused (576 -> 960)": (HIDDEN, HIDDEN + 2 * KV_HEADS * HEAD_DIM),
        "gate+up fused (576 -> 3072)": (HIDDEN, 2 * INTER),
        "output head (576 -> 49152)": (HIDDEN, VOCAB),
    }
    packable = torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    print(
        f"{'product':<30} {'fp32 ms':>8} {'GFLOP/s':>8} {'fp32 packed':>12} {'bf16':>8} {'bf16 packed':>12}  (GFLOP/s)"
    )
    for name, (k, n) in shapes.items():
        x, w = torch.randn(b, k), torch.randn(n, k)
        ms = ms_per_call(lambda x=x, w=w: F.linear(x, w), 30)
        flop = 2 * b * k * n
        fp32_packed = "-"
        if torch.backends.mkldnn.is_available():  # the float32 weight laid out once for oneDNN
            pw32 = torch.ops.mkldnn._reorder_linear_weight(w, b)
            call32 = lambda x=x, pw=pw32: torch.ops.mkldnn._linear_pointwise(x, pw, None, "none", [], "")  # noqa: E731
            fp32_packed = f"{flop / ms_per_call(call32, 30) / 1e6:.1f}"
        xb, wb = x.bfloat16(), w.bfloat16()
        bf16 = flop / ms_per_call(lambda xb=xb, wb=wb: F.linear(xb, wb), 30) / 1e6
        packed = "-"
        if packable:  # the layout `rollout/packed_linear.py` gives the bf16 rollout copy
            pw = torch.ops.mkldnn._reorder_linear_weight(wb, b)
            call = lambda xb=xb, pw=pw: torch.ops.mkldnn._linear_pointwise(xb, pw, None, "none", [], "")  # noqa: E731
            packed = f"{flop / ms_per_call(call, 30) / 1e6:.1f}"
        print(f"{name:<30} {ms:8.3f} {flop / ms / 1e6:8.1f} {fp32_packed:>12} {bf16:8.1f} {packed:>12}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16, help="rows decoded together")
    ap.add_argument("--context", type=int, default=96, help="tokens the attention reads")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"batch {a.batch}, {a.threads} thread(s), torch {torch.__version__}")
    sampler_parts(a.batch, torch.Generator().manual_seed(0))
    attention_parts(a.batch, a.context)
    gemm_parts(a.batch)


if __name__ == "__main__":
    main()
