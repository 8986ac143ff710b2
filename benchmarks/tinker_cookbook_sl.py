"""tinker-cookbook's supervised recipe (`recipes/sl_basic.py`) training the embedded model through
`turnrl tinker serve`.

    export TINKER_API_KEY=tml-$(openssl rand -hex 16)
    turnrl tinker serve --model smollm2-135m-instruct --state-root /tmp/tinker-state --threads 1 &
    OMP_NUM_THREADS=1 python benchmarks/tinker_cookbook_sl.py --base-url http://127.0.0.1:8000

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
Adam betas (0.9, 0.95) and assistant-only loss are kept. Prints the train NLL of every step (the
cookbook's `train_mean_nll`: the batch's mean NLL per loss token, from the log-probs of that step's
`forward_backward`, so before its `optim_step`) and writes it to `<out>/sl_curve.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


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


def build_config(a: argparse.Namespace, log_path: Path) -> Any:
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
    dataset = FromConversationFileBuilder(common_config=common, file_path=a.data, test_size=a.test_size)
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
        base_url=a.base_url or None,
    )


def read_metrics(log_path: Path) -> list[dict[str, Any]]:
    path = log_path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    try:  # the cookbook is no turnrl dependency: without it, one line saying what to install
        default_data = str(resources.files("tinker_cookbook") / "example_data" / "conversations.jsonl")
    except ModuleNotFoundError as err:
        sys.exit(
            f"tinker_cookbook_sl.py: needs tinker-cookbook ({err.name} is not installed): pip install tinker-cookbook"
        )
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default=os.environ.get("TINKER_BASE_URL", ""), help="the service")
    p.add_argument("--model", default="smollm2-135m-instruct", help="the served base model")
    p.add_argument("--tokenizer", default="", help="its tokenizer's directory (default: turnrl's)")
    p.add_argument("--renderer", default="qwen3_instruct")
    p.add_argument("--data", default=default_data, help="conversations JSONL (the cookbook's example)")
    p.add_argument("--test-size", type=int, default=8, help="conversations held out for test/nll")
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
    from tinker_cookbook.recipes import sl_basic

    out = Path(a.out)
    log_path = out / "log"
    if log_path.exists():
        raise SystemExit(
            f"{log_path} exists (the recipe would ask whether to overwrite it); pick another --out"
        )
    register_tokenizer(a.model, tokenizer_directory(a.model, a.tokenizer))
    start = time.perf_counter()
    sl_basic.main(build_config(a, log_path))
    wall = time.perf_counter() - start
    rows = read_metrics(log_path)
    curve = [
        {
            "step": r["step"],
            "train_mean_nll": r["train_mean_nll"],
            "learning_rate": r.get("learning_rate"),
            "test_nll": r.get("test/nll"),
        }
        for r in rows
        if "train_mean_nll" in r
    ]
    summary = {
        "command": " ".join(["python", "benchmarks/tinker_cookbook_sl.py", *sys.argv[1:]]),
        "machine": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "wall_s": round(wall, 1),
        "s_per_step": round(wall / max(1, len(curve)), 2),
        "curve": curve,
    }
    (out / "sl_curve.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{'step':>4}  {'train_nll':>9}  {'lr':>9}  test_nll")
    for c in curve:
        test = "" if c["test_nll"] is None else f"{c['test_nll']:.4f}"
        print(f"{c['step']:>4}  {c['train_mean_nll']:9.4f}  {c['learning_rate'] or 0:9.2e}  {test}")
    print(f"{len(curve)} steps in {wall:.0f} s on {summary['machine']}; {out / 'sl_curve.json'}")


if __name__ == "__main__":
    main()
