"""tinker-cookbook's supervised recipe (`recipes/sl_basic.py`) training the embedded model through
`turnrl tinker serve`, against `turnrl sft` on the same conversations in the same order: seconds per
step and each side's losses.

    python benchmarks/tinker_cookbook_sl.py                       # both paths (the service started here)
    python benchmarks/tinker_cookbook_sl.py --only cookbook --base-url http://127.0.0.1:8000
    python benchmarks/tinker_cookbook_sl.py --steps 4 --test-size 4 --eval-every 2   # smoke

Needs the cookbook (`pip install tinker-cookbook`; it is not a turnrl dependency). The training loop
is the cookbook's own: `sl_basic.main(config)`, which runs `tinker_cookbook.supervised.train.main`
unmodified. Only the config is built here, because `sl_basic.build_config_blueprint` looks the model
up in the cookbook's model tables (`model_info.get_recommended_renderer_name`), which refuse any name
outside them, and its default data set (NoRobots) is downloaded from the Hub. What differs from the
recipe's config is exactly what a user of the service has to change (docs/tinker.md, "tinker-cookbook"):

- `model_name`: the served model as `turnrl tinker serve --model` names it;
- `renderer_name`: given explicitly (`qwen3_instruct` renders SmolLM2's ChatML turns token for token);
- the tokenizer: the cookbook loads `model_name` with `AutoTokenizer`, which knows no
  `smollm2-135m-instruct`; the model's local directory is registered under that name here
  (`tokenizer_utils.register_tokenizer`);
- the data set: the cookbook's own `example_data/conversations.jsonl` (`FromConversationFileBuilder`,
  the recipe's documented alternative), with `--test-size` conversations held out for `test/nll`;
- `batch_size`, `max_length` and `max_steps` sized for a CPU.

The recipe's learning rate (2e-4), linear decay, one epoch, LoRA rank 32 (the cookbook's default),
Adam betas (0.9, 0.95) and assistant-only loss are kept. Every conversation without a system message
gets SmolLM2's default system line, the one SmolLM2's own chat template writes, so that the
cookbook's renderer and turnrl's template give the same tokens (checked on the first conversation).

The turnrl path: `turnrl sft` on the conversations the cookbook trains on, in the order it takes
them (its own dataset builder's split and epoch-0 shuffle, written to `<out>/data/train.jsonl`, its
held-out split to `val.jsonl`), unshuffled and unsorted, with the cookbook's settings spelled out:
LoRA of the service's shape (rank `--lora-rank`, alpha 32, every attention and MLP projection and the
unembedding), the same learning rate decaying linearly (`optim.lr_decay=linear`), Adam betas (0.9,
0.95), no gradient clipping or weight decay, `--batch-size` conversations a step in one micro-batch,
`--max-length` tokens cut on the right, validation every `--eval-every` steps. One difference stays:
the cookbook weighs each conversation's tokens to sum to 1 (`reduction="mean"`), turnrl weighs every
assistant token alike, so the two losses are not the same number.

Seconds per step: the cookbook's loop, each step's `time/submit_batch` and `time/finish_batch` less
its evaluations (`time/evals`), so creating the training client and the final save are left out as
turnrl's model loading is (its wall time less evaluations is in `sl.json` too); turnrl's
`timing_s/step` (validation excluded). Each side on one torch thread. Prints the table and writes `<out>/sl.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

from _cli import cli, cpu_name, read_jsonl, service_lora, start_tinker_server

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system line SmolLM2's chat template writes when a chat has none."""


def tokenizer_directory(model: str, given: str) -> str:
    """Where the tokenizer of `model` lies: `--tokenizer`, else turnrl's local directory of it."""
    if given:
        return given
    from turnrl.models.loader import model_directory

    return str(model_directory(model))


def register_tokenizer(model: str, directory: str) -> None:
    """Make the cookbook's `get_tokenizer(model)` load the tokenizer from `directory`."""
    from functools import cache

    from tinker_cookbook import tokenizer_utils
    from transformers import AutoTokenizer

    if model != directory:
        tokenizer_utils.register_tokenizer(model, cache(lambda: AutoTokenizer.from_pretrained(directory)))


def with_system_line(source: str, out: Path) -> Path:
    """The conversations of `source`, each without a system message given SmolLM2's default one."""
    rows = read_jsonl(Path(source))
    for row in rows:
        if not row["messages"] or row["messages"][0]["role"] != "system":
            row["messages"] = [{"role": "system", "content": SYSTEM}, *row["messages"]]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def build_config(a: argparse.Namespace, data: Path, log_path: Path, base_url: str) -> Any:
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=a.model,
        renderer_name=a.renderer,
        max_length=a.max_length,
        batch_size=a.batch_size,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    dataset = FromConversationFileBuilder(common_config=common, file_path=str(data), test_size=a.test_size)
    return train.Config(
        log_path=str(log_path),
        model_name=a.model,
        recipe_name="recipe_sl_basic",
        renderer_name=a.renderer,
        dataset_builder=dataset,
        learning_rate=a.lr,
        lr_schedule="linear",
        num_epochs=1,
        eval_every=a.eval_every,
        lora_rank=a.lora_rank,
        max_steps=a.steps,
        base_url=base_url or None,
    )


def cookbook_order(a: argparse.Namespace, data: Path, out: Path) -> tuple[Path, Path]:
    """The conversations the cookbook's run trains on, in its order (its builder's split, then the
    epoch-0 shuffle its trainer asks for), and its held-out ones, as turnrl rows; checks that the
    cookbook's tokens of the first one are turnrl's."""
    builder = build_config(a, data, out / "unused", "").dataset_builder
    train, test = builder()
    train.set_epoch(seed=0)
    n = min(a.steps, len(train)) * a.batch_size
    rows = [{"messages": m} for m in train.shuffle_dataset.select(range(n))["messages"]]
    held = [{"messages": m} for m in test.hf_dataset["messages"]] if test is not None else []
    check_tokens(a, rows[0]["messages"], train.get_batch(0)[0])
    paths = out / "data" / "train.jsonl", out / "data" / "val.jsonl"
    for path, part in zip(paths, (rows, held), strict=True):
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
    return paths


def check_tokens(a: argparse.Namespace, messages: list[dict[str, Any]], datum: Any) -> None:
    """The first conversation's tokens and loss mask as turnrl's SFT builds them against the
    cookbook's datum of it (its input plus the last target): the two runs must see the same text."""
    from transformers import AutoTokenizer

    from turnrl.supervised.chat import tokenize_conversation

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_directory(a.model, a.tokenizer))
    ours = tokenize_conversation(tokenizer, messages, None, {tokenizer.eos_token_id}, "row 0")
    targets = datum.loss_fn_inputs["target_tokens"].data
    theirs = [*datum.model_input.to_ints(), targets[-1]]
    weighted = [int(w > 0) for w in datum.loss_fn_inputs["weights"].data]
    if ours.ids[: a.max_length] != theirs:
        first = next(
            (i for i, (x, y) in enumerate(zip(ours.ids, theirs, strict=False)) if x != y),
            min(len(ours.ids), len(theirs)),
        )
        raise SystemExit(
            f"the cookbook's renderer and turnrl's template differ on the first conversation at token {first} "
            f"({len(theirs)} against {len(ours.ids)} tokens): the runs would not see the same text"
        )
    if ours.mask[1 : len(theirs)] != weighted:
        raise SystemExit("the cookbook and turnrl train on different tokens of the first conversation")


def run_cookbook(a: argparse.Namespace, data: Path, out: Path) -> dict[str, Any]:
    from tinker_cookbook.recipes import sl_basic

    server, base_url = (None, a.base_url) if a.base_url else start_tinker_server(a.model, out / "service")
    log_path = out / "cookbook"
    start = time.perf_counter()
    try:
        sl_basic.main(build_config(a, data, log_path, base_url))
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    wall = time.perf_counter() - start
    rows = read_jsonl(log_path / "metrics.jsonl")
    steps = [r for r in rows if "train_mean_nll" in r]
    evals = sum(r.get("time/evals", 0.0) for r in rows)
    # the loop's own seconds: each step's submit (batch, evaluations, requests) and finish (waiting on
    # its futures), less the evaluations; creating the client and the last save are outside
    loop = sum(r.get("time/submit_batch", 0.0) + r.get("time/finish_batch", 0.0) for r in rows) - evals
    n = max(1, len(steps))
    return {
        "train_nll": [r["train_mean_nll"] for r in steps],
        "test_nll": [(r["step"], r["test/nll"]) for r in rows if "test/nll" in r],
        "mean_s_per_step": loop / n,
        "wall_less_evals_s_per_step": (wall - evals) / n,
        "eval_s": evals,
        "wall_s": wall,
    }


def turnrl_command(a: argparse.Namespace, train: Path, val: Path, out: Path) -> list[str]:
    return [
        "sft",
        f"model.path={a.model}",
        f"data.train_files=[{train}]",
        *([f"data.val_files=[{val}]"] if val.read_text().strip() else []),
        f"data.max_length={a.max_length}",
        "data.truncation=right",
        "data.shuffle=false",
        "data.length_window=0",
        f"trainer.train_batch_size={a.batch_size}",
        f"trainer.micro_batch_size={a.batch_size}",
        f"trainer.total_training_steps={a.steps}",
        f"trainer.test_freq={a.eval_every}",
        f"optim.lr={a.lr}",
        "optim.lr_decay=linear",
        "optim.betas=[0.9,0.95]",
        "optim.grad_clip=0",
        "optim.weight_decay=0",
        *service_lora(a.lora_rank),
        "trainer.num_threads=1",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={out / 'turnrl'}",
    ]


def run_turnrl(a: argparse.Namespace, train: Path, val: Path, out: Path) -> dict[str, Any]:
    args = turnrl_command(a, train, val, out)
    wall = cli(args, out / "turnrl.log")  # a failed run ends the benchmark with its log's tail
    rows = read_jsonl(out / "turnrl" / "metrics.jsonl")
    steps = [r for r in rows if "timing_s/step" in r]
    per_step = [r["timing_s/step"] for r in steps]
    return {
        "command": "turnrl " + shlex.join(args),
        "train_nll": [r["sft/loss"] for r in steps],
        "test_nll": [(r["step"], r["val/sft/loss"]) for r in rows if "val/sft/loss" in r],
        "s_per_step": per_step,
        "mean_s_per_step": sum(per_step) / max(1, len(per_step)),
        "wall_s": wall,
    }


def main() -> None:
    try:  # the cookbook is no turnrl dependency: without it, one line saying what to install
        default_data = str(resources.files("tinker_cookbook") / "example_data" / "conversations.jsonl")
    except ModuleNotFoundError as err:
        sys.exit(
            f"tinker_cookbook_sl.py: needs tinker-cookbook ({err.name} is not installed): pip install tinker-cookbook"
        )
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["cookbook", "turnrl"], default=None, help="run one path only")
    p.add_argument(
        "--base-url",
        default=os.environ.get("TINKER_BASE_URL", ""),
        help="a running service (default: start one)",
    )
    p.add_argument("--model", default="smollm2-135m-instruct", help="the served base model")
    p.add_argument("--tokenizer", default="", help="its tokenizer's directory (default: turnrl's)")
    p.add_argument("--renderer", default="qwen3_instruct")
    p.add_argument("--data", default=default_data, help="conversations JSONL (the cookbook's example)")
    p.add_argument("--test-size", type=int, default=8, help="conversations held out for the test NLL")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--out", default="runs/tinker_cookbook_sl")
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    out = Path(a.out)
    if (out / "cookbook").exists() or (out / "turnrl").exists():
        raise SystemExit(
            f"{out} holds an earlier run (the recipe would ask whether to overwrite it); pick another --out"
        )
    register_tokenizer(a.model, tokenizer_directory(a.model, a.tokenizer))
    data = with_system_line(a.data, out / "data" / "conversations.jsonl")
    train, val = cookbook_order(a, data, out)
    result: dict[str, Any] = {
        "command": shlex.join(["python", "benchmarks/tinker_cookbook_sl.py", *sys.argv[1:]]),
        "machine": cpu_name(),
        "cpu_count": os.cpu_count(),
    }
    for name, fn in (
        ("cookbook", lambda: run_cookbook(a, data, out)),
        ("turnrl", lambda: run_turnrl(a, train, val, out)),
    ):
        if a.only in (None, name):
            print(f"{name} ...", flush=True)
            result[name] = fn()
    (out / "sl.json").write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)


def print_table(result: dict[str, Any]) -> None:
    print("\n| path | s/step | train loss, first -> last | held-out loss (step: value) |\n|---|---|---|---|")
    for name in ("cookbook", "turnrl"):
        r = result.get(name)
        if r is None:
            continue
        held = ", ".join(f"{s}: {v:.3f}" for s, v in r["test_nll"])
        print(
            f"| {name} | {r['mean_s_per_step']:.2f} | {r['train_nll'][0]:.3f} -> {r['train_nll'][-1]:.3f} | {held} |"
        )
    if "cookbook" in result and "turnrl" in result:
        ratio = result["cookbook"]["mean_s_per_step"] / result["turnrl"]["mean_s_per_step"]
        print(f"\nthe service takes {ratio:.2f}x turnrl sft's time per step ({result['machine']})")


if __name__ == "__main__":
    main()
