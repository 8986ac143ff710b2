"""Rollout speed: turnrl's HFEngine vs `model.generate`, and both vs the memory-bandwidth bound.

    python benchmarks/rollout_speed.py                                   # CPU: SmolLM2-135M shapes, batch 8 and 64
    python benchmarks/rollout_speed.py --batches 16,64 --threads 1 --contenders turnrl,turnrl-bf16,generate
    python benchmarks/rollout_speed.py --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --batches 8,64,256

Every contender decodes the same prompts (random ids, `--prompt-len` tokens) to exactly
`--new-tokens` tokens (EOS never ends a row), sampling at temperature 1 with no top-k/top-p, from
the same randomly initialised model of the named shape (speed does not depend on the weights).
For each batch size it prints tokens/s (new tokens over wall time, prefill included, median of
`--repeats` after one warm-up), the wall time per decode step (ms/step: the per-token latency a
row sees) and % of the bound:

    bound tokens/s = batch / (bytes read per decode step / measured copy bandwidth)
    bytes per step = all weights + the KV cache of the batch at the mean context length

(copy bandwidth: a large on-device tensor copied, read + write bytes over time). On a GPU that is
the number that matters. On a CPU a batch of 16+ rows is bound by arithmetic as much as by bytes,
so the script also measures the **float32 matmul roofline**: the best rate of a square product
(`--roofline-size`, 1024 on a CPU, at the same thread count). Against it:

- `ms/step`: one decode step, (wall of an N-token call - wall of a 1-token call) / (N - 1);
- `step % roof`: a decode step's useful arithmetic (2 FLOP per weight of every product, head
  included, per row; attention over the mean context) at the roofline rate, over `ms/step`;
- `call % roof`: the same for the whole call, prefill included (every prompt token through the
  layers, the head at sampled positions only), over its wall time.

Contenders:
- `turnrl`: HFEngine with the device's default `sync_every` (1 on CPU, 16 on CUDA) and the
  preallocated KV cache (`rollout.kv_cache=preallocated`, the default);
- `turnrl-dynkv`: the same with transformers' dynamic cache, which copies itself every token;
- `turnrl-graph` (`--compile`): `rollout.compile=true`, the fixed-shape decode step compiled
  (CUDA graphs on a GPU), its compile time printed apart (it falls in the warm-up);
- `turnrl-sync1`: HFEngine syncing with the host after every token (the pre-GPU-path loop);
- `turnrl-before`: the engine with the sampler and decode attention it had before they changed
  (`torch.multinomial`, transformers' SDPA decode path), everything else the same;
- `turnrl-bf16` (float32 models only): `rollout.dtype=bfloat16`, sampling from a bfloat16 copy
  (on a CPU with oneDNN bf16 its linear layers read weights packed once: `rollout/packed_linear.py`);
- `turnrl-bf16-graph` (`--compile`, float32 models only): both, the copy's step compiled;
- `generate`: `model.generate(do_sample=True, min_new_tokens=max_new_tokens=N)`.
`--contenders` picks some of them (a batch of 64 on a 2-core CPU takes minutes per contender).
All calls of a batch size are timed in turns (A, B, C, A, B, C, ...), so load that drifts slows
every contender alike. Quote ratios from one invocation, with the machine.
"""

from __future__ import annotations

import argparse
import contextlib
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
    with device:  # random init where the model runs: a 0.5B model takes tens of seconds on a CPU
        return AutoModelForCausalLM.from_config(shape_config(shape), dtype=dtype).eval()


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


def matmul_roofline(
    device: torch.device,
    size: int,
    dtype: torch.dtype = torch.float32,
    repeats: int = 5,
    warmup: int = 1,
    pick: Callable[[list[float]], float] = min,
) -> float:
    """FLOP/s of `size`-cube products (the machine's matmul roofline): the best (`pick`) of `repeats`
    timed after `warmup` untimed ones."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(warmup):
        a @ b
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * size**3 / pick(times)


def generation_flops(model: torch.nn.Module, batch: int, prompt_len: int, new_tokens: int) -> float:
    """The useful arithmetic of one generate call: 2 FLOP per weight per token through the layers' products
    (prompt and sampled tokens alike; the last sampled token is never fed back), the head (vocab x hidden)
    at the prompt's last position and every decode step, and attention's two products over the context."""
    cfg = model.config
    head = model.get_output_embeddings().weight.numel()
    layers = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)) - head
    fed = prompt_len + new_tokens - 1  # tokens through the trunk per row
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    # position t (1-based) attends to t tokens: scores and weighted values, 2 FLOP each per element
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * fed * (fed + 1) / 2
    return batch * (2 * layers * fed + 2 * head * new_tokens + attn)


def bound_tokens_per_s(model: torch.nn.Module, batch: int, context: float, bandwidth: float) -> float:
    cfg = model.config
    elem = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * elem
    step_bytes = weights + kv_per_token * context * batch
    return batch / (step_bytes / bandwidth)


def round_robin(
    calls: dict[str, Callable[[], object]], device: torch.device, repeats: int
) -> dict[str, float]:
    """Median wall seconds of each call, timed in turns (A, B, C, A, B, C, ...) after one warm-up each,
    so that a machine whose load drifts slows every contender alike."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    for fn in calls.values():
        fn()  # warm-up: allocator, kernels
    for _ in range(repeats):
        for key, fn in calls.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


class BeforeEngine(HFEngine):
    """The engine as it was before the sampler and attention changes, for a side-by-side ratio:
    `torch.multinomial` (an exponential per vocabulary entry) and transformers' SDPA decode path."""

    @staticmethod
    def _sample(
        logits: torch.Tensor, p: SamplingParams, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = logits.float() / p.temperature
        token = torch.multinomial(torch.softmax(scaled, -1), 1, generator=gen).squeeze(-1)
        return token, torch.log_softmax(scaled, -1).gather(-1, token[:, None]).squeeze(-1)

    def generate(self, *args: object, **kwargs: object) -> object:
        import turnrl.rollout.hf as hf

        keep = hf.decode_attention
        hf.decode_attention = lambda model: contextlib.nullcontext()  # type: ignore[assignment]
        try:
            return super().generate(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            hf.decode_attention = keep


def decode_step_flops(model: torch.nn.Module, batch: int, context: float) -> float:
    """One decode step's useful arithmetic: 2 FLOP per weight of every product (layers and head) per
    row, and attention's two products over `context` tokens."""
    cfg = model.config
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return batch * (2 * weights + 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * context)


def run_batch(
    model: torch.nn.Module,
    tok: object,
    batch: int,
    args: argparse.Namespace,
    device: torch.device,
    bw: float,
    roofline: float,
) -> None:
    g = torch.Generator().manual_seed(batch)
    prompts = torch.randint(100, model.config.vocab_size, (batch, args.prompt_len), generator=g).tolist()
    contenders: dict[str, Callable[[int], object]] = {}  # new tokens -> one generation
    engines: dict[str, HFEngine] = {}
    low = next(model.parameters()).dtype == torch.float32
    for label, every, cache, dtype in (
        ("turnrl-before", 0, "preallocated", ""),
        ("turnrl", 0, "preallocated", ""),
        ("turnrl-dynkv", 0, "dynamic", ""),
        ("turnrl-sync1", 1, "preallocated", ""),
        *([("turnrl-bf16", 0, "preallocated", "bfloat16")] if low else []),
        *([("turnrl-graph", 0, "compile", "")] if args.compile else []),
        *([("turnrl-bf16-graph", 0, "compile", "bfloat16")] if args.compile and low else []),
    ):
        if args.contenders and label not in args.contenders:
            continue
        engine = (BeforeEngine if label == "turnrl-before" else HFEngine)(
            model,
            tok,
            batch_size=batch,
            sync_every=every,
            kv_cache="dynamic" if cache == "compile" else cache,
            compile_decode=cache == "compile",
            dtype=dtype,
        )
        engines[label] = engine
        # fixed lengths: EOS never ends a row
        contenders[label] = lambda n, e=engine: e.generate(
            prompts, SamplingParams(max_new_tokens=n, temperature=1.0, seed=1, ignore_eos=True)
        )
    if not args.skip_generate and (not args.contenders or "generate" in args.contenders):
        ids = torch.tensor(prompts, device=device)
        contenders["generate"] = lambda n: model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=n,
            min_new_tokens=n,
            pad_token_id=tok.pad_token_id,  # type: ignore[attr-defined]
        )
    new = args.new_tokens
    bound = bound_tokens_per_s(model, batch, args.prompt_len + new / 2, bw)
    ideal_step_s = decode_step_flops(model, batch, args.prompt_len + new / 2) / roofline
    ideal_call_s = generation_flops(model, batch, args.prompt_len, new) / roofline
    calls = {(k, n): (lambda f=fn, n=n: f(n)) for k, fn in contenders.items() for n in (new, 1)}
    wall = round_robin(calls, device, args.repeats)  # (contender, new tokens) -> seconds
    speed: dict[str, float] = {}
    for label in sorted(contenders, key=lambda k: k != "generate"):  # generate first: the ratios' denominator
        step_s = (wall[label, new] - wall[label, 1]) / (new - 1)  # the 1-token call: prompts in, one out
        speed[label] = tps = batch * new / wall[label, new]
        ratio = f"{tps / speed['generate']:.2f}x" if "generate" in speed else "-"
        print(
            f"{batch:>6} {label:>17} {tps:>10.0f} {1000 * step_s:>9.2f} {100 * tps / bound:>7.1f}% "
            f"{100 * ideal_step_s / step_s:>10.1f}% {100 * ideal_call_s / wall[label, new]:>10.1f}% {ratio:>12}",
            flush=True,
        )
    print(
        f"{batch:>6} {'ideal':>17} {bound:>10.0f} {1000 * ideal_step_s:>9.2f}  (bound tokens/s; roofline ms/step)"
    )
    for label in ("turnrl-graph", "turnrl-bf16-graph"):
        if label in engines:
            print(
                f"{batch:>6} {label}: compile + graph recording {engines[label].compile_seconds:.1f} s (in the warm-up)"
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
    ap.add_argument("--contenders", default="", help="comma-separated contenders to run (default: all)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--roofline-size", type=int, default=0, help="matmul side (0 = 1024 on CPU, 8192 on GPU)")
    args = ap.parse_args()
    args.contenders = [c for c in args.contenders.split(",") if c]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    model = build(args.shape, dtype, device)
    tok = load_tokenizer(args.tokenizer)
    bw = copy_bandwidth(device)
    roofline = matmul_roofline(device, args.roofline_size or (8192 if device.type == "cuda" else 1024))
    n_params = sum(p.numel() for p in model.parameters())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {name} ({device}), {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(
        f"model {args.shape} random init, {n_params / 1e6:.0f}M params, {dtype}; copy bandwidth {bw / 1e9:.1f} GB/s; "
        f"float32 matmul roofline {roofline / 1e9:.0f} GFLOP/s"
    )
    print(f"prompt {args.prompt_len} tokens, {args.new_tokens} new tokens per row, temperature 1")
    print(
        f"{'batch':>6} {'contender':>17} {'tokens/s':>10} {'ms/step':>9} {'% bound':>8} {'step % roof':>11} "
        f"{'call % roof':>11} {'vs generate':>12}"
    )
    for batch in (int(b) for b in args.batches.split(",")):
        run_batch(model, tok, batch, args, device, bw, roofline)


if __name__ == "__main__":
    main()
