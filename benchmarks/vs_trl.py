"""GRPO step time: TRL's GRPOTrainer vs turnrl on the same work, one after the other, each in a fresh process.

    pip install -e ".[bench]"                      # TRL
    python benchmarks/vs_trl.py                    # CPU: the embedded SmolLM2-135M, fp32
    python benchmarks/vs_trl.py --short --variant rollout.dtype=bfloat16   # short prompts; then turnrl again, sampling from a bf16 copy
    python benchmarks/vs_trl.py --shape qwen2.5-0.5b --dtype bfloat16 --tokenizer DIR   # GPU, random init

Both sides get the same model directory, the same prompts (the default task's first
`--prompts`, in its chat template), `--n` samples per prompt, exactly `--tokens` generated
tokens per sample (EOS disabled: TRL through `min_new_tokens`, turnrl through
`rollout.ignore_eos`), the same reward function (distinct characters / 50, so that advantages are
not all zero), learning rate, GRPO advantages, a token-mean clipped loss, no KL term, one
optimizer step per batch over the whole batch in one micro-batch, and no gradient checkpointing.
The first step of each is a warm-up and is reported apart; the ratio is of the mean of the rest.

`--shape` builds a randomly initialised model of a real shape instead (speed does not depend on
the weights), saved with the tokenizer from `--tokenizer` (a directory with tokenizer files,
e.g. the embedded model's cache), so the script needs no download.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REWARD = """def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return len(set(solution_str)) / 50
"""


def distinct_chars(completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL's side of REWARD: completions arrive as lists of messages for chat prompts."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [len(set(t)) / 50 for t in texts]


def prompts(k: int, short: bool = False) -> list[list[dict[str, str]]]:
    """The default task's prompts (one worked example, then a sum), k of them; `short`: the question
    alone (no worked example), where sharing one prompt pass per group saves less."""
    from turnrl.tasks.addition import make_row

    rows = [make_row(1 + i % 9, 1 + (i * 7) % 9, "train", i)["prompt"] for i in range(k)]
    return [r[-1:] for r in rows] if short else rows


def model_dir(args: argparse.Namespace, work: Path) -> Path:
    if not args.shape:
        from turnrl.models.loader import model_directory
        from turnrl.trainer.run_dirs import resolve_model_path

        return model_directory(resolve_model_path(args.model))
    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).parent))
    from rollout_speed import build  # type: ignore[import-not-found]

    out = work / f"random-{args.shape}"
    if (out / "config.json").is_file():  # built by the parent; the children share it
        return out
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    build(args.shape, getattr(torch, args.dtype), device).save_pretrained(out)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    tok.save_pretrained(out)
    return out


def run_trl(args: argparse.Namespace, path: Path, chats: list[Any], out: Path) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t0)

    batch = args.prompts * args.n
    cfg = GRPOConfig(
        output_dir=str(out / "trl"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.n,
        max_completion_length=args.tokens,
        generation_kwargs={"min_new_tokens": args.tokens},
        temperature=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        loss_type="dapo",  # token-mean over the batch, as turnrl's default loss_agg_mode
        scale_rewards="group",
        num_iterations=1,
        max_steps=args.steps + 1,
        gradient_checkpointing=False,
        bf16=args.dtype == "bfloat16",
        use_cpu=not torch.cuda.is_available(),
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=0,
        max_grad_norm=1.0,
        weight_decay=0.0,
        model_init_kwargs={"dtype": args.dtype},
    )
    data = Dataset.from_list([{"prompt": c} for c in chats] * (args.steps + 2))
    trainer = GRPOTrainer(
        model=str(path), reward_funcs=distinct_chars, args=cfg, train_dataset=data, callbacks=[StepTimer()]
    )
    trainer.train()
    return times


def run_turnrl(
    args: argparse.Namespace, path: Path, chats: list[Any], out: Path
) -> tuple[list[float], dict[str, float]]:
    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    out.mkdir(parents=True, exist_ok=True)
    data = out / "prompts.jsonl"
    rows = [
        {
            "data_source": "bench",
            "prompt": c,
            "reward_model": {"ground_truth": ""},
            "extra_info": {"index": i},
        }
        for i, c in enumerate(chats * (args.steps + 2))  # one batch per step, never a short epoch
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = out / "reward.py"
    reward.write_text(REWARD)
    batch = args.prompts * args.n
    overrides = [
        f"model.path={path}",
        "model.dtype=auto",  # the default: float32 on a CPU; on one GPU float32 master weights, bf16 compute
        f"data.train_files=[{data}]",
        f"data.val_files=[{data}]",
        f"data.train_batch_size={args.prompts}",
        f"data.max_response_length={args.tokens}",
        f"rollout.n={args.n}",
        "rollout.ignore_eos=true",
        f"rollout.generation_batch_size={batch}",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "actor.use_kl_loss=false",
        f"actor.ppo_mini_batch_size={args.prompts}",
        f"actor.ppo_micro_batch_size={batch}",
        f"actor.optim.lr={args.lr}",
        "actor.optim.lr_warmup_steps=0",
        f"reward.custom_function.path={reward}",
        f"trainer.default_local_dir={out / 'turnrl'}",
        "trainer.logger=[jsonl]",
        "trainer.val_before_train=false",
        "trainer.test_freq=0",
        "trainer.save_freq=0",
        f"trainer.device={'cuda' if torch.cuda.is_available() else 'cpu'}",
        *args.overrides,
    ]
    overrides.append(f"trainer.total_training_steps={args.steps + 1}")
    trainer = Trainer(load_config(None, overrides))
    try:
        metrics = [trainer.step() for _ in range(args.steps + 1)]  # the loop of fit(), without its logging
    finally:
        trainer.close()
    stages = {
        k[9:]: statistics.mean(m[k] for m in metrics[1:]) for k in metrics[-1] if k.startswith("timing_s/")
    }
    stages["compile_in_first_step"] = getattr(trainer.engine, "compile_seconds", 0.0)
    # the gap between the engine's and the trainer's log-probs, when a correction mode measures it
    for key in ("rollout_corr/abs_diff_mean", "rollout_corr/abs_diff_max", "rollout_corr/weight_mean"):
        if key in metrics[-1]:
            stages[key] = statistics.mean(m[key] for m in metrics[1:])
    if args.peak_tflops > 0:  # the update's model FLOPs utilisation: 6 x params x tokens (forward + backward)
        tokens = statistics.mean(m["perf/total_num_tokens"] for m in metrics[1:])
        params = sum(p.numel() for p in trainer.engine.model.parameters())  # type: ignore[attr-defined]
        flops = 6 * params * tokens / statistics.mean(m["timing_s/update_actor"] for m in metrics[1:])
        stages["update_TFLOPs"] = flops / 1e12
        stages["update_MFU_%"] = 100 * flops / (args.peak_tflops * 1e12)
    return [m["timing_s/step"] for m in metrics], stages


def run_side(side: str, work: Path) -> dict[str, Any]:
    """Run one side (`trl` or `turnrl:<variant index>`) in a child process of this same command."""
    out = work / f"{side.replace(':', '_')}.json"
    cmd = [sys.executable, *sys.argv, "--side", side, "--work", str(work)]
    rc = subprocess.run(cmd).returncode
    if rc != 0 or not out.is_file():
        print(f"{side}: the child process failed (exit {rc}); its row is missing")
        return {}
    return json.loads(out.read_text())


def side_result(side: str, work: Path) -> dict[str, Any]:
    """In the child: run `side` and write its row where the parent reads it."""
    got: dict[str, Any] = {}
    if side == "trl":
        try:
            import trl
        except ImportError:
            print("TRL is not installed: pip install -e '.[bench]' (skipping TRL)")
            return {}
        try:
            t = run_trl(ARGS, ARGS.path, ARGS.chats, work)
        except Exception as err:  # a TRL that does not run here must not cost turnrl's side
            first = (str(err).strip().splitlines() or [""])[0][:200]
            print(f"TRL {trl.__version__} failed ({type(err).__name__}: {first}); turnrl alone")
            return {}
        got["trl"] = {"version": trl.__version__, "first": t[0], "mean": statistics.mean(t[1:])}
    else:
        i = int(side.split(":")[1])
        variant = ["", *ARGS.variant][i]
        name = "turnrl" + (f" {variant}" if variant else "")
        ARGS.overrides = [*ARGS.overrides, *variant.split()]
        t, stages = run_turnrl(ARGS, ARGS.path, ARGS.chats, work / f"run{i}")
        got[name] = {"first": t[0], "mean": statistics.mean(t[1:]), "stages": stages}
    (work / f"{side.replace(':', '_')}.json").write_text(json.dumps(got))
    return got


ARGS = argparse.Namespace()  # the child's parsed arguments, with its model directory and prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="any turnrl model.path")
    ap.add_argument("--shape", default="", help="random init of this shape instead (see rollout_speed.py)")
    ap.add_argument("--tokenizer", default="", help="tokenizer directory for --shape")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument(
        "--peak-tflops", type=float, default=0.0, help="device peak (H100 bf16 dense: 989) to report MFU"
    )
    ap.add_argument("--only", choices=["trl", "turnrl"], default=None)
    ap.add_argument("--short", action="store_true", help="prompts without the worked example")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="run turnrl once more with these extra overrides, space-separated (repeatable), "
        "e.g. --variant rollout.dtype=bfloat16",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads for both (0 = torch's default)")
    ap.add_argument("overrides", nargs="*", help="extra turnrl key=value overrides")
    ap.add_argument("--side", default="", help=argparse.SUPPRESS)  # internal: the child runs one side
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    work = Path(args.work or tempfile.mkdtemp(prefix="turnrl-vs-trl-"))
    path = model_dir(args, work)
    if args.threads:
        torch.set_num_threads(args.threads)
        args.overrides.append(f"trainer.num_threads={args.threads}")
    chats = prompts(args.prompts, args.short)
    ARGS.__dict__.update(vars(args), path=path, chats=chats)
    if args.side:
        side_result(args.side, work)
        return
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"cpu, {torch.get_num_threads()} threads"
    )
    print(f"model {args.shape or args.model} ({path}), {args.dtype}, {device}")
    print(
        f"{args.prompts} prompts{' (short)' if args.short else ''} x {args.n} samples x {args.tokens} tokens, "
        f"{args.steps} timed steps + 1 warm-up; turnrl overrides {args.overrides}"
    )
    result: dict[str, Any] = {}
    sides = [] if args.only == "turnrl" else ["trl"]
    sides += [] if args.only == "trl" else [f"turnrl:{i}" for i in range(1 + len(args.variant))]
    for side in sides:
        # each side in a fresh process, one after the other: in one shared process turnrl's update
        # ran 5.8 s/step after TRL in float32 and 9.6 s after TRL with bf16=True (short prompts),
        # so sharing a process measured what ran first, not turnrl
        result.update(run_side(side, work))
    for name, r in result.items():
        if name == "trl":
            print(f"TRL {r['version']}: {r['mean']:.2f} s/step (first {r['first']:.2f} s)")
            continue
        parts = "  ".join(f"{k} {v:.2f}" for k, v in r["stages"].items() if k != "step")
        print(f"{name}: {r['mean']:.2f} s/step (first {r['first']:.2f} s)  [{parts}]", flush=True)
        if "trl" in result:
            r["ratio"] = ratio = result["trl"]["mean"] / r["mean"]
            print(f"{name} is {ratio:.2f}x TRL's step throughput", flush=True)
    (work / "result.json").write_text(json.dumps(result, indent=1))
    print(f"result: {work / 'result.json'}")


if __name__ == "__main__":
    main()
