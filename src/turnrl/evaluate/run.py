"""`evaluate(cfg, out_dir)`: the greedy and sampled passes over the eval prompts, then the files.

The rollout (single-turn, or agent episodes with their tool servers), the reward and the
generate-and-score pass are the trainer's own (`trainer.setup.build_rollout` / `build_reward`,
`trainer.validation.scored_batches` over `trainer.stages.generate_and_score`, the stages 2-6 that
training samples through), batched by `data.val_batch_size` like validation: the greedy
pass of a run's checkpoint reproduces the run's last `val/test_score/*` exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from turnrl.agent.assemble import EPISODE_FIELDS
from turnrl.config import Config
from turnrl.data.dataset import Example, load_examples
from turnrl.evaluate.inputs import check_out_dir, eval_files, train_run_of
from turnrl.evaluate.metrics import greedy_metrics, ks_for, sampled_metrics
from turnrl.evaluate.output import SampleWriter, sample_row, write_json
from turnrl.models import sources
from turnrl.models.loader import load_tokenizer
from turnrl.models.policy import build_policy
from turnrl.rewards.guard import ERRORS_KEY
from turnrl.rewards.scorer import OWN_PREFIX, own_metrics, rates_by_source
from turnrl.rollout.base import RolloutEngine, SamplingParams
from turnrl.rollout.packed_linear import can_pack, pack_linears
from turnrl.runtime import seed_everything
from turnrl.trainer import checkpoint
from turnrl.trainer.run_dirs import resolve_model_path
from turnrl.trainer.setup import (
    build_reward,
    build_rollout,
    check_plugins,
    check_scorers,
    default_precision,
    pick_device,
)
from turnrl.trainer.stages import Scored
from turnrl.trainer.validation import scored_batches
from turnrl.workers.engines import build_engine


@dataclass
class PassResult:
    """One pass over the prompts: every prompt's data source and its responses' scores, in order."""

    sources: list[str] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)
    diagnostics: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    rates: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """`{"accuracy" | "format_rate": {data_source: per-response values}}` (`rates_by_source`)."""
    seconds: float = 0.0
    engine: dict[str, float] = field(default_factory=dict)
    """The in-process engine's work in this pass (`engine/*`, rollout/work.py); empty for other engines."""


def passes(cfg: Config) -> dict[str, SamplingParams]:
    """The passes to run, by name. Greedy samples as training's validation does by default
    (`rollout.val_temperature=0`, `val_n=1`, the trainer's seed, stops and top-p/top-k)."""
    r, e = cfg.rollout, cfg.eval
    base = SamplingParams(
        max_new_tokens=cfg.data.max_response_length,
        top_p=r.top_p,
        top_k=r.top_k,
        stop=list(r.stop),
        seed=cfg.trainer.seed,
    )
    out = {}
    if e.greedy:
        out["greedy"] = dataclasses.replace(base, n=1, temperature=0.0)
    if e.n > 0:
        out["sampled"] = dataclasses.replace(
            base, n=e.n, temperature=e.temperature, top_p=e.top_p, top_k=e.top_k
        )
    return out


def training_precision(cfg: Config) -> Config:
    """The precisions a training run of `cfg` validates in (`trainer.setup.default_precision`): with
    `auto` on a device that has bfloat16, greedy answers come from the bfloat16 sampling copy there,
    so they must here too, or a run's checkpoint would not score its own `val/test_score`."""
    t = cfg.trainer
    model, rollout = default_precision(
        cfg.model, cfg.rollout, t.nnodes * t.n_gpus_per_node, pick_device(t.device)
    )
    return dataclasses.replace(cfg, model=model, rollout=rollout)


def evaluate(cfg: Config, out_dir: Path, run: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Evaluate `cfg.model.path` on the eval prompts; writes `out_dir/summary.json` and
    `samples.jsonl` and returns the summary. `run`: the training run the config came from."""
    start = time.perf_counter()
    cfg = training_precision(cfg)
    check_out_dir(out_dir)
    check_plugins(cfg)  # an unknown tool: one line before the model loads
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    seed_everything(cfg.trainer.seed, cfg.trainer.deterministic)
    files = eval_files(cfg)
    model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)  # a run's checkpoint, exported once
    tokenizer = load_tokenizer(model_path, cfg.model.cache_dir)
    examples = _eval_examples(cfg, files, tokenizer)
    check_scorers(cfg, examples)  # before the model loads
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        results = _run_passes(cfg, out_dir, model_path, tokenizer, examples, progress)
    except BaseException:
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()  # nothing was written: leave no empty directory behind
        raise
    summary = summarize(cfg, files, results, run, time.perf_counter() - start)
    write_json(out_dir / "summary.json", summary)
    return summary


def _eval_examples(cfg: Config, files: list[str], tokenizer: Any) -> list[Example]:
    """The eval files' prompts, the first `eval.max_prompts` of them when that is set."""
    examples = load_examples(files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    if cfg.eval.max_prompts:
        examples = examples[: cfg.eval.max_prompts]
    return examples


def _run_passes(
    cfg: Config, out_dir: Path, model_path: str, tokenizer: Any, examples: list[Example], progress: bool
) -> dict[str, PassResult]:
    """Load the model and start its engine, rollout and reward; run every pass; close them, last first."""
    with contextlib.ExitStack() as stack:
        # the weights a `server` or `vllm` engine was handed are copies, not results (removed once
        # the engine has closed)
        stack.callback(shutil.rmtree, out_dir / "rollout_weights", ignore_errors=True)
        model = load_policy(cfg, model_path)
        if cfg.eval.pack_weights and cfg.rollout.engine == "hf":
            pack_frozen(model, cfg.data.val_batch_size)
        engine = _build_engine(cfg, model, tokenizer, out_dir, model_path)
        stack.callback(engine.close)
        if cfg.rollout.engine == "server" and cfg.rollout.server.urls:
            # servers of their own hold whatever they loaded last: load the weights evaluated here
            # (written under `rollout.server.weights_dir`, which they must see, as in training)
            engine.sync_weights(0)
        pad_id = int(tokenizer.pad_token_id)
        rollout = build_rollout(cfg, engine, tokenizer, pad_id)  # starts the tools' servers
        stack.callback(rollout.close)
        reward = build_reward(cfg, tokenizer, rollout.services)
        stack.callback(reward.close)
        reward.check({e.data_source for e in examples})

        def scored(params: SamplingParams) -> Iterator[Scored]:  # validation's own pass and batches
            return scored_batches(rollout, reward, examples, params, cfg.data.val_batch_size, pad_id)

        work = getattr(engine, "work", None)  # where the time went: prefill against decode
        results: dict[str, PassResult] = {}
        with SampleWriter(out_dir / "samples.jsonl") as writer:
            for name, params in passes(cfg).items():
                if work is not None:
                    work.take()
                results[name] = run_pass(name, params, scored, len(examples), writer, progress)
                if work is not None:
                    results[name].engine = work.take()
        return results


def _build_engine(
    cfg: Config, model: torch.nn.Module, tokenizer: Any, out_dir: Path, model_path: str
) -> RolloutEngine:
    """The rollout engine over `model`, as the trainer builds it (its weights read on demand)."""
    return build_engine(
        cfg.rollout,
        model,
        tokenizer,
        out_dir,  # a `server` engine's child writes its log here
        model_path,
        lambda: {k: v.detach().cpu() for k, v in model.state_dict().items()},
        dtype=cfg.model.dtype,
        cache_dir=cfg.model.cache_dir,
        seed=cfg.trainer.seed,
    )


def pack_frozen(model: torch.nn.Module, rows: int) -> int:
    """Lay the frozen model's linear weights out once for oneDNN where it runs them (a CPU); returns
    how many layers were packed (0 elsewhere). Only for a model nothing trains: the packed layout is
    not updated by an optimizer step."""
    dtype = next(model.parameters()).dtype
    return len(pack_linears(model, rows)) if can_pack(model, dtype) else 0


def load_policy(cfg: Config, path: str) -> torch.nn.Module:
    """The policy as the trainer builds it, from `path` (`model.path` resolved), frozen; without LoRA:
    a run's export has its adapters merged already, and fresh adapters on a base model would add
    exactly zero."""
    model_cfg = dataclasses.replace(cfg.model, path=path, lora_rank=0, gradient_checkpointing=False)
    model, _ = build_policy(model_cfg, pick_device(cfg.trainer.device), cfg.trainer.seed)
    return model.eval().requires_grad_(False)


def run_pass(
    name: str,
    params: SamplingParams,
    scored: Callable[[SamplingParams], Iterator[Scored]],
    prompts: int,
    writer: SampleWriter,
    progress: bool,
) -> PassResult:
    """One pass over the `prompts` prompts that `scored(params)` generates and scores batch by batch;
    every response goes to `writer` as it comes."""
    from tqdm import tqdm

    result, n = PassResult(), params.n
    t0 = time.perf_counter()
    label = "greedy" if name == "greedy" else f"sampled n={n}"
    bar = tqdm(total=prompts, desc=f"eval {label}", unit="prompt", disable=not progress, dynamic_ncols=True)
    for part in scored(params):
        batch = part.batch
        first_prompt = len(result.scores)
        for row in range(0, len(batch), n):  # rows A,A,B,B: prompt row // n, its sample row % n
            result.sources.append(str(batch["data_source"][row]))
            result.scores.append(part.scores[row : row + n])
        for row, score in enumerate(part.scores):
            writer.write(sample_row(name, batch, row, n, first_prompt + row // n, part.texts[row], score))
        collect_diagnostics(result.diagnostics, batch, part.extras)
        for metric, by_source in rates_by_source(list(batch["data_source"]), part.extras).items():
            for source, values in by_source.items():
                result.rates.setdefault(metric, {}).setdefault(source, []).extend(values)
        bar.update(len(batch) // n)
    bar.close()
    result.seconds = time.perf_counter() - t0
    return result


def collect_diagnostics(into: dict[str, list[float]], batch: Any, extras: dict[str, list[float]]) -> None:
    """Per-response values to average: model tokens, the reward's extra values, agent episode stats."""
    into["response_length"] += batch["response_mask"].sum(-1).tolist()  # model tokens, not observations
    for key, values in extras.items():
        into[key if key.startswith(OWN_PREFIX) else f"reward_extra/{key}"] += values
    for key in EPISODE_FIELDS:
        if key in batch:
            into[key] += [float(v) for v in batch[key]]


def per_source(result: PassResult) -> dict[str, list[list[float]]]:
    """The prompts' score lists grouped by data source, sources in order of first appearance."""
    out: dict[str, list[list[float]]] = {}
    for source, scores in zip(result.sources, result.scores, strict=True):
        out.setdefault(source, []).append(scores)
    return out


def pass_metrics(name: str, groups: list[list[float]], threshold: float) -> dict[str, float]:
    if name == "greedy":
        return greedy_metrics([g[0] for g in groups])
    return sampled_metrics(groups, threshold)


def summarize(
    cfg: Config, files: list[str], results: dict[str, PassResult], run: Path | None, seconds: float
) -> dict[str, Any]:
    """summary.json: what was evaluated, how, and the metrics per data source and overall."""
    threshold = cfg.eval.success_threshold
    grouped = {name: per_source(r) for name, r in results.items()}
    some_pass = next(iter(grouped.values()))  # every pass saw the same prompts
    table: dict[str, dict[str, float | int]] = {s: {"prompts": len(g)} for s, g in some_pass.items()}
    overall: dict[str, float | int] = {"prompts": sum(len(g) for g in some_pass.values())}
    for name, by_source in grouped.items():
        for source, groups in by_source.items():
            table[source].update(pass_metrics(name, groups, threshold))
        # concatenated source by source, as validation does for `val/test_score/mean`: the same float
        overall.update(pass_metrics(name, [g for gs in by_source.values() for g in gs], threshold))
    if "greedy" in results:  # skill apart from format, as validation's `val/accuracy`, `val/format_rate`
        for metric, values in results["greedy"].rates.items():
            for source, v in values.items():
                if source:
                    table[source][metric] = float(np.mean(v))
            overall[metric] = float(np.mean([x for v in values.values() for x in v]))
    ckpt = model_checkpoint(Path(cfg.model.path).expanduser())
    return {
        "model": cfg.model.path,
        "checkpoint": str(ckpt) if ckpt else None,
        "run_config": str(run / "config.yaml") if run else None,
        "files": files,
        "success_threshold": threshold,
        "passes": {name: pass_settings(name, params, results[name]) for name, params in passes(cfg).items()},
        "counts": {
            "prompts": overall["prompts"],
            "prompts_per_data_source": {s: v["prompts"] for s, v in table.items()},
            "responses": {name: sum(len(g) for g in r.scores) for name, r in results.items()},
        },
        "metrics": {"overall": overall, "per_data_source": table},
        "diagnostics": {name: diagnostics(r) for name, r in results.items()},
        "wall_time_s": seconds,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": dataclasses.asdict(cfg),
    }


def pass_settings(name: str, params: SamplingParams, result: PassResult) -> dict[str, Any]:
    settings = {k: v for k, v in dataclasses.asdict(params).items() if k != "max_new_tokens"}
    settings["max_response_length"] = params.max_new_tokens
    if name == "sampled":
        settings["ks"] = ks_for(params.n)
    settings["seconds"] = result.seconds
    if result.engine:
        settings["engine"] = result.engine
    return settings


def diagnostics(result: PassResult) -> dict[str, float]:
    """Means over responses (the reward stage's own metrics, failures and the judge's counts, are
    counts: `turnrl.rewards.scorer.own_metrics`)."""
    d = result.diagnostics
    out = {f"{k}/mean": float(np.mean(v)) for k, v in d.items() if not k.startswith(OWN_PREFIX) and v}
    out.update(own_metrics(d))
    out[ERRORS_KEY] = out.get(ERRORS_KEY, 0.0)
    return out


def model_checkpoint(path: Path) -> Path | None:
    """The checkpoint whose weights a run or checkpoint directory `model.path` stands for."""
    if sources.is_checkpoint_dir(path):
        return path
    return checkpoint.latest(path) if train_run_of(path) == path else None
