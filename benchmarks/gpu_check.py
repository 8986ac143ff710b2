"""One prepared check of the real-hardware path on one GPU: tests, decode, update, TRL side by side.

    python benchmarks/gpu_check.py --prepare .gpu     # here, once: tiny-random + tokenizer as plain directories
    python benchmarks/gpu_check.py --dry-run          # here, on a CPU: every section at toy sizes
    python benchmarks/gpu_check.py --assets .gpu      # on the GPU machine (about 6 minutes on an H200)

Sections, each a child process with its own time limit inside `--budget` seconds, in this order:

1. `ceilings`: the card's measured device-to-device copy bandwidth (bytes read + written) and bf16
   matmul rate (8192-cube products, median of 10 after warm-up): the bounds below are against these;
2. `tests`: the GPU-marked tests (`pytest -m gpu`: compiled decode, bf16 compute, a GRPO step with
   float32 master weights, a multi-turn agent step, all on CUDA);
3. `decode`: `rollout_speed.py` on Qwen2.5-0.5B shapes (random init, bf16), batch 8 and 64, 64 prompt
   + 256 new tokens: the plain loop, the compiled CUDA-graph step (`rollout.compile`) and
   `model.generate`, tokens/s and % of the HBM bound;
4. `update`: the actor's update pass (chunked log-probs, policy-gradient surrogate, backward, AdamW)
   at the same shapes, 64 rows (8 prompts x 8 samples), bf16 parameters and float32 master weights
   with bf16 compute: tokens/s and MFU against the measured bf16 matmul rate (6 x parameters x tokens);
   the top CUDA kernels of one step of each, and of the compiled decode step;
5. `vs_trl`: `vs_trl.py` at the shape of docs/results/speed-gpu.md (8 x 8 x 256), TRL and turnrl in one invocation,
   turnrl's defaults (on one GPU: float32 master weights, bf16 compute, a bf16 sampling copy, the
   compiled decode step) and bf16 parameters (`model.dtype=bfloat16`) beside them.

It prints one table at the end and writes it, with every section's log, under `--out` (default
`$OUT`, else `gpu_check_out/`). No CUDA: one line, and the run stops unless `--dry-run`. A card without
bf16 runs in float16 and says so; a section that fails or runs out of time is one row saying which.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

# name -> share of the budget it may use (a section that ends early leaves the rest to the next ones)
SECTIONS = {"ceilings": 0.03, "tests": 0.14, "decode": 0.3, "update": 0.2, "vs_trl": 0.33}


def sizes(dry: bool) -> dict[str, Any]:
    """The real shapes, or toy ones that exercise the same code on a CPU in seconds."""
    if dry:
        return dict(shape="tiny-random", batches="4,8", prompt=16, new=16, prompts=2, n=2, matmul=512)
    return dict(shape="qwen2.5-0.5b", batches="8,64", prompt=64, new=256, prompts=8, n=8, matmul=8192)


# ------------------------------------------------------------------ sections run in a child process


def section_ceilings(args: argparse.Namespace) -> dict[str, Any]:
    from rollout_speed import copy_bandwidth, matmul_roofline  # type: ignore[import-not-found]

    device = torch.device(args.device)
    size = sizes(args.dry_run)["matmul"]
    rate = matmul_roofline(device, size, args.dtype, repeats=10, warmup=3, pick=statistics.median)
    return {
        "copy_GBps": copy_bandwidth(device) / 1e9,
        "matmul_TFLOPs": rate / 1e12,
        "matmul_dtype": str(args.dtype).removeprefix("torch."),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def top_kernels(prof: Any, k: int = 8) -> list[dict[str, Any]]:
    """The `k` device kernels with the most self time, with their share of all device time."""
    events = [e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0]
    total = sum(e.self_device_time_total for e in events) or 1.0
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    return [
        {
            "kernel": e.key[:90],
            "ms": e.self_device_time_total / 1e3,
            "share_%": 100 * e.self_device_time_total / total,
        }
        for e in events[:k]
    ]


def profiled(device: torch.device, fn: Any) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        sync(device)
    return top_kernels(prof) if device.type == "cuda" else []


# (label, parameters' dtype ("low": the run's bf16 or fp16), turnrl's AdamW (fused where it fits) or torch's default)
UPDATE_RUNS = (
    ("bf16 params", "low", True),
    ("fp32 master, bf16 compute", torch.float32, True),
    ("fp32 master, bf16 compute, torch's default AdamW", torch.float32, False),
)


def section_update(args: argparse.Namespace) -> dict[str, Any]:
    """The actor's update pass at the decode shapes, in the two precisions, timed and profiled; and
    the compiled decode step's top kernels."""
    from rollout_speed import build  # type: ignore[import-not-found]

    from turnrl.models.logprobs import attach_log_prob_method
    from turnrl.models.precision import compute_dtype
    from turnrl.rollout.base import SamplingParams
    from turnrl.rollout.hf import HFEngine
    from turnrl.workers.optim import fused_adamw_fits

    s, device = sizes(args.dry_run), torch.device(args.device)
    rows, width = s["prompts"] * s["n"], s["prompt"] + s["new"]
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 30000, (s["prompts"], s["prompt"]), generator=g).repeat_interleave(s["n"], 0)
    ids = torch.cat([prompt, torch.randint(100, 30000, (rows, s["new"]), generator=g)], 1).to(device)
    mask, pos = torch.ones_like(ids), torch.arange(width, device=device).expand(rows, width)
    adv = torch.randn(rows, s["new"], device=device)
    out: dict[str, Any] = {"tokens_per_step": rows * width}
    for label, params_dtype, fused in UPDATE_RUNS:
        params_dtype = args.dtype if params_dtype == "low" else params_dtype
        model = build(s["shape"], params_dtype, device).train()
        compute = compute_dtype("auto" if device.type == "cuda" else "float32", params_dtype, device)
        attach_log_prob_method(model, compute)
        params = list(model.parameters())
        # turnrl's choice (workers.optim), or torch's own default (foreach) beside it
        opt = torch.optim.AdamW(params, lr=1e-6, fused=fused_adamw_fits(params) if fused else None)

        def step(model: Any = model, opt: Any = opt) -> None:
            lp, _ = model.response_log_probs(ids, mask, pos, s["new"], 1.0, 1024, True)
            (-(lp * adv).mean()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # warm-up: allocator, cuBLAS handles, optimizer state
        times = []
        for _ in range(3):
            sync(device)
            t0 = time.perf_counter()
            step()
            sync(device)
            times.append(time.perf_counter() - t0)
        n_params = sum(p.numel() for p in model.parameters())
        sec = statistics.median(times)
        out[label] = {
            "s_per_step": sec,
            "tokens_per_s": rows * width / sec,
            "TFLOPs": 6 * n_params * rows * width / sec / 1e12,
            "compute": str(compute).removeprefix("torch.") if compute else "params' own",
            "top_kernels": profiled(device, step),
        }
        del model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    model = build(s["shape"], args.dtype, device)
    from turnrl.models.loader import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    batch = max(int(b) for b in s["batches"].split(","))
    engine = HFEngine(model, tok, batch_size=batch, compile_decode=device.type == "cuda")
    prompts = torch.randint(100, 30000, (batch, s["prompt"]), generator=g).tolist()
    p = SamplingParams(max_new_tokens=64, temperature=1.0, seed=1, ignore_eos=True)
    engine.generate(prompts, p)  # compiles
    out["decode_compiled"] = engine.compile_decode is not False
    out["decode_top_kernels"] = profiled(device, lambda: engine.generate(prompts, p))
    return out


# ------------------------------------------------------------------ the driver


def child(
    args: argparse.Namespace, cmd: list[str], limit: float, log: Path, env: dict[str, str]
) -> tuple[int, str, float]:
    """Run `cmd` in its own process group for at most `limit` seconds; (exit code, output, seconds).
    Exit code 124: out of time (the group is killed)."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    return rc, log.read_text(errors="replace"), time.perf_counter() - t0


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "(no output)"


def decode_rows(text: str) -> list[dict[str, Any]]:
    """`rollout_speed.py`'s table rows: batch, contender, tokens/s, ms/step, % of the HBM bound."""
    pat = re.compile(r"^\s*(\d+)\s+(turnrl\S*|generate)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%", re.M)
    return [
        {
            "batch": int(b),
            "contender": c,
            "tokens_per_s": float(t),
            "ms_per_step": float(ms),
            "bound_%": float(pb),
        }
        for b, c, t, ms, pb in pat.findall(text)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--prepare", metavar="DIR", help="save tiny-random and its tokenizer under DIR/tiny and stop"
    )
    ap.add_argument("--assets", default=".gpu", help="the --prepare directory (tiny model and tokenizer)")
    ap.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU: check the script itself")
    ap.add_argument("--budget", type=float, default=450, help="seconds for all sections together")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS),
        help="which sections, comma-separated, in their fixed order (the budget is shared among them): "
        "one call's 10 minutes hold the tests and the update, or the decode and vs_trl, not all four",
    )  # fmt: skip
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out")
    ap.add_argument("--section", help=argparse.SUPPRESS)  # internal: run one in-process section
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare:
        return prepare(Path(args.prepare))
    args.dtype = torch.bfloat16
    if args.section:  # a child: print one JSON line
        if args.device == "cuda" and not torch.cuda.is_bf16_supported():
            args.dtype = torch.float16
        fn = {"ceilings": section_ceilings, "update": section_update}[args.section]
        print("RESULT " + json.dumps(fn(args)), flush=True)
        return None
    return drive(args)


def prepare(directory: Path) -> None:
    from turnrl.models.loader import load_model

    model, tok = load_model("tiny-random", torch.device("cpu"), dtype="float32", seed=0)
    out = directory / "tiny"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"tiny-random and its tokenizer saved in {out}; carry {directory} to the GPU machine")


def chosen_sections(spec: str) -> list[str]:
    """`--sections a,b` as names in `SECTIONS`' order; an unknown name is one line naming it."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise SystemExit(f"gpu_check: --sections {spec!r}: unknown {unknown or 'none given'}; known: {', '.join(SECTIONS)}")  # fmt: skip
    return [n for n in SECTIONS if n in names]


def drive(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tiny = (ROOT / args.assets / "tiny").resolve()
    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        why = "torch is a CPU build" if torch.version.cuda is None else "no CUDA device is visible"
        print(f"gpu_check: no CUDA device ({why}, torch {torch.__version__}); on a CPU run --dry-run")
        raise SystemExit(2)
    if not tiny.is_dir():
        print(
            f"gpu_check: {tiny} is missing: run `python benchmarks/gpu_check.py --prepare {args.assets}` first"
        )
        raise SystemExit(2)
    device = "cuda" if cuda and not args.dry_run else "cpu"
    dtype = "bfloat16"
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        dtype = "float16"
        print("gpu_check: this card has no bfloat16; every section runs in float16")
    s = sizes(args.dry_run)
    env = dict(os.environ, TURNRL_TINY_DIR=str(tiny), TURNRL_GPU_TESTS_ON=device, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault("HF_HUB_OFFLINE", "1")
    py = sys.executable
    own = [py, str(HERE / "gpu_check.py"), "--device", device, "--tokenizer", str(tiny)] + (
        ["--dry-run"] if args.dry_run else []
    )
    header = environment(device)
    print(header, flush=True)
    deadline = time.perf_counter() + args.budget
    results: dict[str, Any] = {"environment": header, "dry_run": args.dry_run}
    ceilings: dict[str, Any] = {}
    allowance = 0.0  # what the sections so far were given and did not use passes on
    chosen = chosen_sections(args.sections)
    total_share = sum(SECTIONS[n] for n in chosen)
    for name in chosen:
        left = deadline - time.perf_counter()
        allowance += SECTIONS[name] / total_share * args.budget
        limit = min(left, max(allowance, 30))
        if left < 20:
            results[name] = {"status": "skipped: the budget ran out"}
            continue
        cmd = section_command(name, own, device, dtype, tiny, s, ceilings.get("matmul_TFLOPs", 0.0))
        rc, text, sec = child(args, cmd, limit, out / f"{name}.log", env)
        allowance -= sec
        status = (
            "ok" if rc == 0 else ("out of time" if rc == 124 else f"failed (exit {rc}): {last_line(text)}")
        )
        results[name] = {"status": status, "seconds": round(sec, 1)}
        found = re.search(r"^RESULT (.*)$", text, re.M)
        if found:
            results[name].update(json.loads(found.group(1)))
        if name == "ceilings":
            ceilings = results[name]
        elif name == "tests":
            results[name]["summary"] = last_line(text)
        elif name == "decode":
            results[name]["rows"] = decode_rows(text)
            results[name]["notes"] = [ln for ln in text.splitlines() if "compile" in ln.lower()][-4:]
        elif name == "vs_trl":
            path = re.search(r"^result: (.*)$", text, re.M)
            if path and Path(path.group(1)).is_file():
                results[name]["result"] = json.loads(Path(path.group(1)).read_text())
        print(f"[{name}] {status} in {sec:.0f} s", flush=True)
    table = render(results)
    (out / "gpu_check.json").write_text(json.dumps(results, indent=1))
    (out / "gpu_check.md").write_text(table)
    print(table)


def section_command(
    name: str, own: list[str], device: str, dtype: str, tiny: Path, s: dict[str, Any], peak: float
) -> list[str]:
    """The child process of section `name` (`own`: this script with the run's device and tokenizer)."""
    py, dtype = sys.executable, dtype if device == "cuda" else "float32"
    if name in ("ceilings", "update"):
        return [*own, "--section", name]
    if name == "tests":
        return [py, "-m", "pytest", "-q", "-m", "gpu", "-n", "0", "-p", "no:cacheprovider",
                "tests/integration/test_cuda.py"]  # fmt: skip
    if name == "decode":
        return [py, str(HERE / "rollout_speed.py"), "--shape", s["shape"], "--device", device,
                "--dtype", dtype, "--batches", s["batches"], "--prompt-len", str(s["prompt"]),
                "--new-tokens", str(s["new"]), "--repeats", "1", "--tokenizer", str(tiny),
                "--contenders", "turnrl,turnrl-graph,generate", "--roofline-size", str(s["matmul"]),
                *(["--compile"] if device == "cuda" else [])]  # fmt: skip
    return [py, str(HERE / "vs_trl.py"), "--shape", s["shape"], "--tokenizer", str(tiny), "--dtype", dtype,
            "--prompts", str(s["prompts"]), "--n", str(s["n"]), "--tokens", str(s["new"]), "--steps", "2",
            "--peak-tflops", f"{peak:.1f}", "--variant", "model.dtype=bfloat16"]  # fmt: skip


def environment(device: str) -> str:
    import importlib.metadata as md

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "-"

    card = torch.cuda.get_device_name() if device == "cuda" else "CPU (dry run)"
    names = ("transformers", "trl", "datasets", "pyarrow", "peft", "triton")
    return f"{card}; torch {torch.__version__} (CUDA {torch.version.cuda}); " + ", ".join(
        f"{n} {version(n)}" for n in names
    )


def render(r: dict[str, Any]) -> str:
    lines = [f"# gpu_check: {r['environment']}", ""]
    c = r.get("ceilings", {})
    if "copy_GBps" in c:
        lines.append(
            f"ceilings: device copy {c['copy_GBps']:.0f} GB/s (read + write), "
            f"{c['matmul_dtype']} matmul {c['matmul_TFLOPs']:.0f} TFLOP/s"
        )
    lines += ["", "| section | status | seconds |", "|---|---|---|"]
    lines += [f"| {k} | {r[k].get('status')} | {r[k].get('seconds', '-')} |" for k in SECTIONS if k in r]
    t = r.get("tests", {})
    if t.get("summary"):
        lines += ["", f"tests: {t['summary']}"]
    d = r.get("decode", {})
    if d.get("rows"):
        lines += [
            "",
            "| batch | decode contender | tokens/s | ms/step | % of HBM bound |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {x['batch']} | {x['contender']} | {x['tokens_per_s']:.0f} | {x['ms_per_step']:.2f} | {x['bound_%']:.1f} |"
            for x in d["rows"]
        ]
        lines += [f"  {n.strip()}" for n in d.get("notes", [])]
    u = r.get("update", {})
    peak = c.get("matmul_TFLOPs", 0.0)
    for label, _, _ in UPDATE_RUNS:
        if label in u:
            x = u[label]
            mfu = f", {100 * x['TFLOPs'] / peak:.1f} % MFU" if peak else ""
            lines += [
                "",
                f"update, {label} ({u['tokens_per_step']} tokens/step, compute {x['compute']}): "
                f"{x['s_per_step']:.3f} s/step, {x['tokens_per_s']:.0f} tokens/s, {x['TFLOPs']:.1f} TFLOP/s{mfu}",
            ]
            lines += [f"  {k['share_%']:5.1f} %  {k['ms']:8.2f} ms  {k['kernel']}" for k in x["top_kernels"]]
    if u.get("decode_top_kernels"):
        lines += [
            "",
            f"compiled decode step (compiled: {u.get('decode_compiled')}), top kernels of 64 tokens:",
        ]
        lines += [
            f"  {k['share_%']:5.1f} %  {k['ms']:8.2f} ms  {k['kernel']}" for k in u["decode_top_kernels"]
        ]
    v = r.get("vs_trl", {}).get("result", {})
    if v:
        lines += ["", "| side | s/step (first) | ratio to TRL | stages |", "|---|---|---|---|"]
        for name, x in v.items():
            stages = x.get("stages", {})
            parts = ", ".join(
                f"{k} {val:.2f}" for k, val in stages.items() if isinstance(val, float) and k != "step"
            )
            ratio = f"{x['ratio']:.2f}x" if "ratio" in x else "-"
            lines.append(f"| {name} | {x['mean']:.2f} ({x['first']:.1f}) | {ratio} | {parts} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
