"""Rollout speed: turnrl's HFEngine vs `model.generate`, and both vs the memory-bandwidth bound.

    python benchmarks/rollout_speed.py                                   # CPU: SmolLM2-135M shapes, batch 8 and 64
    python benchmarks/rollout_speed.py --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --batches 8,64,256

Every contender decodes the same prompts (random ids, `--prompt-len` tokens) to exactly
`--new-tokens` tokens (EOS never ends a row), sampling at temperature 1 with no top-k/top-p, from
the same randomly initialised model of the named shape (speed does not depend on the weights).
For each batch size it prints tokens/s (new tokens over wall time, prefill included, median of
`--repeats` after one warm-up), the wall time per decode step (ms/step: the per-token latency a
row sees) and % of the bound:

    bound tokens/s = batch / (bytes read per decode step / measured copy bandwidth)
    bytes per step = all weights + the KV cache of the batch at the mean context length

(copy bandwidth: a large on-device tensor copied, read + write bytes over time). On a CPU the
bound is loose (decoding is compute- not bandwidth-bound there); on a GPU it is the number that
matters. Contenders:
- `turnrl`: HFEngine with the device's default `sync_every` (1 on CPU, 16 on CUDA) and the
  preallocated KV cache (`rollout.kv_cache=preallocated`, the default);
- `turnrl-dynkv`: the same with transformers' dynamic cache, which copies itself every token;
- `turnrl-graph` (`--compile`): `rollout.compile=true`, the fixed-shape decode step compiled
  (CUDA graphs on a GPU), its compile time printed apart (it falls in the warm-up);
- `turnrl-sync1`: HFEngine syncing with the host after every token (the pre-GPU-path loop);
- `generate`: `model.generate(do_sample=True, min_new_tokens=max_new_tokens=N)`.
Quote ratios from one invocation, with the machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

from turnrl.models.loader import load_tokenizer
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab
    "tiny-random": ("llama", 64, 128, 2, 4, 2, 49152),
    "smollm2-135m": ("llama", 576, 1536, 30, 9, 3, 49152),
    "qwen2.5-0.5b": ("qwen2", 896, 4864, 24, 14, 2, 151936),
}


def shape_config(shape: str) -> object:
    """A transformers config of the named shape (random weights are built from it)."""
    from transformers import AutoConfig

    kind, hidden, inter, layers, heads, kv, vocab = SHAPES[shape]
    return AutoConfig.for_model(
        kind,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        architectures=[{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[kind]],
    )


def build(shape: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(shape_config(shape), dtype=dtype).to(device).eval()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large on-device copy (read + write)."""
    n = (1 << 30) if device.type == "cuda" else (1 << 28)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(5):
        sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n / min(times)


def bound_tokens_per_s(model: torch.nn.Module, batch: int, context: float, bandwidth: float) -> float:
    cfg = model.config
    elem = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * elem
    step_bytes = weights + kv_per_token * context * batch
    return batch / (step_bytes / bandwidth)


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()  # warm-up: allocator, kernels
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_batch(
    model: torch.nn.Module, tok: object, batch: int, args: argparse.Namespace, device: torch.device, bw: float
) -> None:
    g = torch.Generator().manual_seed(batch)
    prompts = torch.randint(100, model.config.vocab_size, (batch, args.prompt_len), generator=g)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=1)
    contenders: dict[str, Callable[[], object]] = {}
    engines: dict[str, HFEngine] = {}
    params.ignore_eos = True  # fixed lengths: EOS never ends a row
    for label, every, cache in (
        ("turnrl", 0, "preallocated"),
        ("turnrl-dynkv", 0, "dynamic"),
        ("turnrl-sync1", 1, "preallocated"),
        *([("turnrl-graph", 0, "compile")] if args.compile else []),
    ):
        engine = HFEngine(
            model,
            tok,
            batch_size=batch,
            sync_every=every,
            kv_cache="dynamic" if cache == "compile" else cache,
            compile_decode=cache == "compile",
        )
        engines[label] = engine
        contenders[label] = lambda e=engine: e.generate(prompts.tolist(), params)
    if not args.skip_generate:
        ids = prompts.to(device)
        contenders["generate"] = lambda: model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            pad_token_id=tok.pad_token_id,  # type: ignore[attr-defined]
        )
    bound = bound_tokens_per_s(model, batch, args.prompt_len + args.new_tokens / 2, bw)
    speed = {k: batch * args.new_tokens / timed(fn, device, args.repeats) for k, fn in contenders.items()}
    for label, tps in speed.items():
        ratio = f"{tps / speed['generate']:.2f}x" if "generate" in speed else "-"
        step_ms = 1000 * batch / tps  # wall time per decode step (prefill spread over the steps)
        print(f"{batch:>6} {label:>13} {tps:>10.0f} {step_ms:>9.2f} {100 * tps / bound:>7.1f}% {ratio:>12}")
    print(f"{batch:>6} {'bound':>13} {bound:>10.0f} {1000 * batch / bound:>9.2f}")
    if "turnrl-graph" in engines:
        print(
            f"{batch:>6} compile + graph recording {engines['turnrl-graph'].compile_seconds:.1f} s (in the warm-up)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="smollm2-135m", choices=list(SHAPES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="", help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--batches", default="8,64", help="comma-separated batch sizes (responses)")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokenizer", default="tiny-random", help="a model.path or tokenizer directory")
    ap.add_argument("--compile", action="store_true", help="add turnrl with rollout.compile=true")
    ap.add_argument("--skip-generate", action="store_true", help="only turnrl's engine")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    model = build(args.shape, dtype, device)
    tok = load_tokenizer(args.tokenizer)
    bw = copy_bandwidth(device)
    n_params = sum(p.numel() for p in model.parameters())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {name} ({device}), {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(
        f"model {args.shape} random init, {n_params / 1e6:.0f}M params, {dtype}; copy bandwidth {bw / 1e9:.1f} GB/s"
    )
    print(f"prompt {args.prompt_len} tokens, {args.new_tokens} new tokens per row, temperature 1")
    print(
        f"{'batch':>6} {'contender':>13} {'tokens/s':>10} {'ms/step':>9} {'% bound':>8} {'vs generate':>12}"
    )
    for batch in (int(b) for b in args.batches.split(",")):
        run_batch(model, tok, batch, args, device, bw)


if __name__ == "__main__":
    main()
