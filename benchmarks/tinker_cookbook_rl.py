"""tinker-cookbook's RL loop training the embedded model through `turnrl tinker serve`, against the
same run through `turnrl train`: held-out accuracy before and after, and seconds per step.

    python benchmarks/tinker_cookbook_rl.py                         # both paths, 4 steps, group 8
    python benchmarks/tinker_cookbook_rl.py --only cookbook --base-url http://127.0.0.1:8000
    python benchmarks/tinker_cookbook_rl.py --steps 2 --batch-size 2 --group-size 4 --val-rows 8   # smoke

Needs the cookbook (`pip install tinker-cookbook`; it is not a turnrl dependency).

The rows: `turnrl data task addition` (or `--task reasoning_gym:chain_sum`) writes `train.jsonl` and
`val.jsonl` into `<out>/data`; both paths train on the same training rows in the same order
(`--steps` x `--batch-size` of them, no shuffling) and are scored on the same held-out rows, which
neither ever trains on (the task holds them out by problem), greedily, `--max-tokens` tokens, with
turnrl's own scorer of the rows' `data_source` (the addition task's: 1 for the right sum in
`<answer>` tags, 0.1 for a wrong integer in them). Accuracy is the share of held-out rows scored 1.

The cookbook path. `recipes/rl_loop.py` is one `main(config)` that downloads GSM8K from the Hub,
prompts with its own few-shot example and grades `\\boxed{}` answers: none of it takes other rows.
Its loop is the one `tinker_cookbook.rl.train.main` runs (the cookbook's RL trainer, which
`recipes/rl_basic.py` and `recipes/math_rl` drive): sample `group_size` responses per prompt from a
snapshot of the policy, centre each group's rewards, one `forward_backward` with
`importance_sampling` over every response and one `optim_step`, Adam betas (0.9, 0.95). That trainer
runs unmodified here, fed through its own extension points: an `Env` per row (the row's messages
rendered by the cookbook renderer `qwen3_instruct`, which writes SmolLM2's ChatML turns token for
token, after SmolLM2's default system line, so the prompt tokens are exactly those `turnrl train`
samples from; checked below), an `RLDatasetBuilder` over the training rows, and a
`SamplingClientEvaluator` that scores the held-out rows greedily before the first step and after the
last (`eval_every` = the step count). The loss is `importance_sampling` (rl_loop's default
`stable_reinforce` is not served; rl.train's default is `importance_sampling`).

The turnrl path: `turnrl train` with what the cookbook run does spelled out: LoRA of the service's
shape (rank `--lora-rank`, alpha 32, every attention and MLP projection and the unembedding), the
same learning rate, Adam betas (0.9, 0.95), no gradient clipping or weight decay, group-centred
advantages without the std division (`norm_adv_by_std_in_grpo=false`), one optimizer step per batch,
each response's token log-prob terms summed (`seq-mean-token-sum`; the cookbook sums over the whole
batch, a constant factor Adam does not see), temperature 1. On-policy with one update per batch the
PPO ratio is 1, so turnrl's clipped loss and the cookbook's importance-sampling loss give the same
gradient. Its held-out numbers are its own validation (`val/accuracy`, greedy, before the first
step and after the last); its seconds per step are `timing_s/step` (validation excluded).

Seconds per step of the cookbook path are the trainer's `time/total` of each step less the
held-out evaluation inside it. The cookbook samples each response with its own request
(`num_samples=1`); the service batches the requests that wait together into a few engine calls and
runs each prompt of the step's `forward_backward` once (docs/tinker.md, "How it works").

Writes `<out>/rl.json` and prints the table docs/tinker.md quotes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # the cookbook is no turnrl dependency: without it, one line saying what to install
    import chz
    import tinker
    from tinker_cookbook import renderers
    from tinker_cookbook.completers import StopCondition
    from tinker_cookbook.eval.evaluators import SamplingClientEvaluator
    from tinker_cookbook.rl import train as rl_train
    from tinker_cookbook.rl.types import (
        Action,
        ActionExtra,
        Env,
        EnvGroupBuilder,
        Observation,
        RLDataset,
        RLDatasetBuilder,
        StepResult,
    )
    from tinker_cookbook.tokenizer_utils import get_tokenizer, register_tokenizer
except ModuleNotFoundError as err:
    sys.exit(
        f"tinker_cookbook_rl.py: needs tinker-cookbook ({err.name} is not installed): pip install tinker-cookbook"
    )

from _cli import cli, cpu_name, service_lora, start_tinker_server

from turnrl.models.loader import model_directory
from turnrl.rewards.registry import registered, resolve
from turnrl.tasks import scorers

SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system line SmolLM2's chat template writes when a chat has none (turnrl's prompts have none)."""


# ---- turnrl's rows and scorer ------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def score(row: dict[str, Any], text: str) -> tuple[float, float]:
    """(score, acc) of `text` by turnrl's scorer of the row's data source."""
    fn = resolve(row["data_source"], table=registered(extra=scorers()))
    out = fn(row["data_source"], text, row["reward_model"]["ground_truth"], row.get("extra_info"))
    value = float(out["score"] if isinstance(out, dict) else out)
    acc = float(out.get("acc", value == 1.0)) if isinstance(out, dict) else float(value == 1.0)
    return value, acc


def messages(row: dict[str, Any]) -> list[renderers.Message]:
    prompt = row["prompt"]
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if prompt and prompt[0]["role"] == "system":
        return list(prompt)
    return [{"role": "system", "content": SMOLLM_SYSTEM}, *prompt]


# ---- the cookbook's extension points over those rows ---------------------------------------------


class RowEnv(Env):
    """One response to one row, rewarded by turnrl's scorer."""

    def __init__(self, row: dict[str, Any], renderer: renderers.Renderer) -> None:
        self.row, self.renderer = row, renderer

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return self.renderer.build_generation_prompt(messages(self.row)), self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        message, _ = self.renderer.parse_response(action)
        value, acc = score(self.row, renderers.get_text_content(message))
        return StepResult(
            reward=value,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"acc": acc},
        )


@dataclass(frozen=True)
class RowGroup(EnvGroupBuilder):
    """`group_size` environments of one row (the row as JSON: a builder must pickle and hash)."""

    row_json: str
    group_size: int
    model_name: str
    renderer_name: str

    async def make_envs(self) -> Sequence[Env]:
        renderer = renderers.get_renderer(self.renderer_name, get_tokenizer(self.model_name))
        row = json.loads(self.row_json)
        return [RowEnv(row, renderer) for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return [json.loads(self.row_json)["data_source"].replace("/", "_")]


class RowsDataset(RLDataset):
    def __init__(self, groups: list[RowGroup], batch_size: int) -> None:
        self.groups, self.batch_size = groups, batch_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return self.groups[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.groups) // self.batch_size


@chz.chz
class RowsDatasetBuilder(RLDatasetBuilder):
    """The training rows of a JSONL file, in order, `batch_size` prompts per step."""

    train_file: str
    batch_size: int
    group_size: int
    model_name: str
    renderer_name: str

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        groups = [
            RowGroup(json.dumps(row), self.group_size, self.model_name, self.renderer_name)
            for row in read_rows(Path(self.train_file))
        ]
        return RowsDataset(groups, self.batch_size), None


class HeldOut(SamplingClientEvaluator):
    """Greedy held-out score: one response per row at temperature 0."""

    def __init__(self, rows: list[dict[str, Any]], model_name: str, renderer_name: str, max_tokens: int):
        self.rows, self.max_tokens = rows, max_tokens
        self.renderer = renderers.get_renderer(renderer_name, get_tokenizer(model_name))
        self.seconds: list[float] = []

    async def __call__(self, sampling_client: tinker.SamplingClient) -> dict[str, float]:
        start = time.perf_counter()
        params = tinker.SamplingParams(
            max_tokens=self.max_tokens, temperature=0.0, stop=self.renderer.get_stop_sequences()
        )
        prompts = [self.renderer.build_generation_prompt(messages(row)) for row in self.rows]
        outs = await asyncio.gather(
            *[sampling_client.sample(p, num_samples=1, sampling_params=params) for p in prompts]
        )
        scores = []
        for row, out in zip(self.rows, outs, strict=True):
            message, _ = self.renderer.parse_response(out.sequences[0].tokens)
            scores.append(score(row, renderers.get_text_content(message)))
        self.seconds.append(time.perf_counter() - start)
        n = len(scores)
        return {
            "heldout/acc": sum(a for _, a in scores) / n,
            "heldout/score": sum(s for s, _ in scores) / n,
            "heldout/seconds": self.seconds[-1],
        }


# ---- the two paths -------------------------------------------------------------------------------


def write_rows(a: argparse.Namespace, out: Path) -> tuple[Path, Path]:
    data = out / "data"
    n_train = a.steps * a.batch_size
    cmd = [
        sys.executable,
        "-m",
        "turnrl.cli",
        "data",
        "task",
        a.task,
        "--out",
        str(data),
        "--seed",
        str(a.seed),
    ]
    if a.task == "addition":
        cmd += ["--arg", f"n_train={n_train}"]
    else:
        cmd += ["--arg", f"size={n_train}", "--arg", f"val_size={a.val_rows or 40}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    train, val = data / "train.jsonl", data / "val.jsonl"
    rows = read_rows(train)[:n_train]
    if len(rows) < n_train:
        raise SystemExit(f"{train}: {len(rows)} rows, need {n_train}")
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if a.val_rows:
        val.write_text("".join(json.dumps(r) + "\n" for r in read_rows(val)[: a.val_rows]))
    return train, val


def check_prompt_tokens(model: str, renderer_name: str, row: dict[str, Any]) -> None:
    """The cookbook renderer's prompt must be exactly the tokens of the model's chat template."""
    tok = get_tokenizer(model)
    renderer = renderers.get_renderer(renderer_name, tok)
    ours = renderer.build_generation_prompt(messages(row)).to_ints()
    theirs = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
    theirs = list(theirs["input_ids"] if hasattr(theirs, "keys") else theirs)
    if ours != theirs:
        raise SystemExit(f"renderer {renderer_name} and the chat template differ:\n{ours}\n{theirs}")


def run_cookbook(a: argparse.Namespace, out: Path, train: Path, val: Path) -> dict[str, Any]:
    model_dir = str(model_directory(a.model))
    if a.model != model_dir:  # the cookbook's AutoTokenizer does not know turnrl's model names
        register_tokenizer(a.model, lambda: get_tokenizer(model_dir))
    val_rows = read_rows(val)
    check_prompt_tokens(a.model, a.renderer, val_rows[0])
    server = None
    base_url = a.base_url
    if not base_url:
        server, base_url = start_tinker_server(a.model, out)
    evaluator = HeldOut(val_rows, a.model, a.renderer, a.max_tokens)
    config = rl_train.Config(
        learning_rate=a.lr,
        dataset_builder=RowsDatasetBuilder(
            train_file=str(train),
            batch_size=a.batch_size,
            group_size=a.group_size,
            model_name=a.model,
            renderer_name=a.renderer,
        ),
        model_name=a.model,
        recipe_name="recipe_rl_loop",
        renderer_name=a.renderer,
        max_tokens=a.max_tokens,
        log_path=str(out / "cookbook"),
        eval_every=a.steps,
        save_every=0,
        evaluator_builders=[lambda: evaluator],
        loss_fn="importance_sampling",
        lora_rank=a.lora_rank,
        temperature=1.0,
        base_url=base_url,
        max_steps=a.steps,
        num_groups_to_log=0,
    )
    start = time.perf_counter()
    try:
        asyncio.run(rl_train.main(config))
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    wall = time.perf_counter() - start
    rows = read_rows(out / "cookbook" / "metrics.jsonl")
    evals = [r for r in rows if "heldout/acc" in r]
    steps = [r for r in rows if "time/total" in r and "progress/batch" in r]
    per_step = [r["time/total"] - r.get("heldout/seconds", 0.0) for r in steps]
    return {
        "acc_before": evals[0]["heldout/acc"],
        "acc_after": evals[-1]["heldout/acc"],
        "score_before": evals[0]["heldout/score"],
        "score_after": evals[-1]["heldout/score"],
        "train_reward": [r.get("env/all/reward/total") for r in steps],
        "s_per_step": per_step,
        "mean_s_per_step": sum(per_step) / max(1, len(per_step)),
        "wall_s": wall,
    }


def turnrl_command(a: argparse.Namespace, out: Path, train: Path, val: Path) -> list[str]:
    return [
        "train",
        f"model.path={a.model}",
        f"data.train_files=[{train}]",
        f"data.val_files=[{val}]",
        "data.shuffle=false",
        f"data.train_batch_size={a.batch_size}",
        f"data.val_batch_size={a.val_batch}",
        f"data.max_response_length={a.max_tokens}",
        f"rollout.n={a.group_size}",
        "rollout.temperature=1.0",
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=false",
        f"actor.ppo_mini_batch_size={a.batch_size}",
        "actor.loss_agg_mode=seq-mean-token-sum",
        f"actor.optim.lr={a.lr}",
        "actor.optim.betas=[0.9,0.95]",
        "actor.optim.grad_clip=0",
        "actor.optim.weight_decay=0",
        *service_lora(a.lora_rank),
        f"trainer.total_training_steps={a.steps}",
        "trainer.test_freq=0",
        "trainer.val_before_train=true",
        "trainer.save_freq=0",
        f"trainer.seed={a.seed}",
        "trainer.num_threads=1",
        "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={out / 'turnrl'}",
    ]


def run_turnrl(a: argparse.Namespace, out: Path, train: Path, val: Path) -> dict[str, Any]:
    args = turnrl_command(a, out, train, val)
    wall = cli(args, out / "turnrl.log")  # a failed run ends the benchmark with its log's tail
    rows = read_rows(out / "turnrl" / "metrics.jsonl")
    evals = [r for r in rows if "val/accuracy" in r]
    steps = [r for r in rows if "timing_s/step" in r]
    per_step = [r["timing_s/step"] for r in steps]
    return {
        "command": "turnrl " + shlex.join(args),
        "acc_before": evals[0]["val/accuracy"],
        "acc_after": evals[-1]["val/accuracy"],
        "score_before": evals[0]["val/test_score/mean"],
        "score_after": evals[-1]["val/test_score/mean"],
        "train_reward": [r.get("critic/score/mean") for r in steps],
        "s_per_step": per_step,
        "mean_s_per_step": sum(per_step) / max(1, len(per_step)),
        "wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["cookbook", "turnrl"], default=None, help="run one path only")
    p.add_argument("--base-url", default="", help="a running `turnrl tinker serve` (default: start one)")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--renderer", default="qwen3_instruct")
    p.add_argument("--task", default="addition", help="addition or reasoning_gym:<dataset>")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8, help="responses per prompt")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--val-rows", type=int, default=0, help="held-out rows (0 = all the task's)")
    p.add_argument("--val-batch", type=int, default=40, help="turnrl's validation batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/tinker_cookbook_rl")
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    out = Path(a.out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty; pick another --out")
    out.mkdir(parents=True, exist_ok=True)
    train, val = write_rows(a, out)
    result: dict[str, Any] = {
        "machine": cpu_name(),
        "cpu_count": os.cpu_count(),
        "settings": {k: v for k, v in vars(a).items() if k != "base_url"},
        "train_rows": len(read_rows(train)),
        "val_rows": len(read_rows(val)),
    }
    paths = {"cookbook": run_cookbook, "turnrl": run_turnrl}
    for name, run in paths.items():
        if a.only in (None, name):
            load = os.getloadavg()[0]
            result[name] = run(a, out, train, val)
            # the machine is shared: its load while each path ran qualifies the seconds per step
            result[name]["load_avg_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    (out / "rl.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['train_rows']} training rows, {result['val_rows']} held-out rows; {result['machine']}")
    print(
        f"{'path':<10} {'acc before':>10} {'acc after':>9} {'score before':>12} {'score after':>11} {'s/step':>7}"
    )
    for name in ("cookbook", "turnrl"):
        if name in result:
            r = result[name]
            print(
                f"{name:<10} {r['acc_before']:>10.3f} {r['acc_after']:>9.3f} {r['score_before']:>12.3f}"
                f" {r['score_after']:>11.3f} {r['mean_s_per_step']:>7.1f}   load {r['load_avg_1min']}"
            )
    print(out / "rl.json")


if __name__ == "__main__":
    main()
