"""`turnrl trace`: run one real training step and show every stage with its real tensors.

The recorder is a hook of the trainer's stage clock (`turnrl.trainer.stages.StageHook`): the clock
hands it each stage's batch, named by its stage in `turnrl.trainer.stages.STAGES`; it clones the batch
on the spot because later stages change the same batch in place (the prompt tensors are popped,
new fields are added). After the step the inspector adds its own `after_update` (the step's
responses scored by the updated policy) and `metrics`, and the recorded batches become one
self-contained HTML page and a Markdown summary.

The inspector imports the trainer, never the other way round: the trainer knows only the
hook protocol.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.inspector.view import Decoder, StageView, metrics_view, stage_view

# a small step unless the user says otherwise: 2 prompts x 2 samples, one mini-batch
TRACE_DEFAULTS: dict[str, str] = {
    "data.train_batch_size": "2",
    "rollout.n": "2",
    "actor.ppo_mini_batch_size": "2",
    "critic.ppo_mini_batch_size": "2",  # a recipe with a critic must divide the same 2 prompts
    "trainer.val_before_train": "false",
    # the trainer's own old log-probs, shown next to the engine's (a run may skip that pass: bypass=auto)
    "algorithm.rollout_correction.bypass": "false",
}
# always, whatever the recipe or the command line says: the trace's output is its page, so it opens no
# metrics file, no wandb run and writes no rollout dump (in a given run directory those would be strays)
TRACE_FORCED: dict[str, str] = {"trainer.logger": "[]", "trainer.rollout_dump_freq": "0"}


class TraceSetupError(ValueError):
    """The traced run could not start (bad recipe, override, data or model); one line."""


@dataclass
class Record:
    stage: str
    batch: Batch
    elapsed_s: float


def snapshot(batch: Batch) -> Batch:
    """A deep copy on the CPU that later in-place changes to `batch` cannot reach."""
    tensors = {k: v.detach().to("cpu", copy=True) for k, v in batch.tensors.items()}
    non_tensors = {k: copy.deepcopy(v) for k, v in batch.non_tensors.items()}
    try:
        meta = copy.deepcopy(batch.meta)
    except (TypeError, copy.Error):  # meta may hold objects that refuse copying; keep the references
        meta = dict(batch.meta)
    return Batch(tensors, non_tensors, meta)


class TraceRecorder:
    """A stage-clock hook that keeps a snapshot of every stage's batch, in order."""

    wants_batches = True  # and so the actor's per-token update diagnostics

    def __init__(self) -> None:
        self.records: list[Record] = []

    def record(self, stage: str, batch: Batch | None, elapsed_s: float) -> None:
        if batch is None:  # a stage that makes no batch (the weight sync) has nothing to show
            return
        seen = sum(1 for r in self.records if r.stage.split("#", 1)[0] == stage)
        name = stage if seen == 0 else f"{stage}#{seen + 1}"  # a stage recorded twice keeps both
        self.records.append(Record(name, snapshot(batch), elapsed_s))


def trace_overrides(user: list[str], run_dir: str | None) -> list[str]:
    """The trace's defaults, then the user's overrides (which win)."""
    from turnrl.config.loader import valid_keys

    given = {item.split("=", 1)[0].strip().lstrip("+") for item in user if "=" in item}
    out = [f"{k}={v}" for k, v in TRACE_DEFAULTS.items() if k not in given and k in valid_keys()]
    if run_dir and "trainer.default_local_dir" not in given:
        out.append(f"trainer.default_local_dir={run_dir}")
    return out + list(user) + [f"{k}={v}" for k, v in TRACE_FORCED.items() if k in valid_keys()]


# what `after_update` needs of a recorded batch: a whole sequence and its old log-probs (the
# actor's update diagnostics hold old log-probs but no prompt, so they do not qualify)
AFTER_UPDATE_INPUTS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "responses",
    "response_mask",
    "old_log_probs",
)


def after_update(trainer: Any, batch: Batch) -> Batch | None:
    """Score the step's responses with the updated policy: the ratio the next PPO epoch would see."""
    if any(k not in batch for k in AFTER_UPDATE_INPUTS):
        return None
    # `uid` keeps each prompt's samples on one rank when the actor group is data-parallel
    inputs = batch.select([*AFTER_UPDATE_INPUTS, *(["uid"] if "uid" in batch else [])])
    new_lp = trainer.actor.compute_log_prob(inputs)["log_probs"].float()  # a CPU tensor
    old, mask = batch["old_log_probs"].float(), batch["response_mask"] > 0
    zero = torch.zeros(())
    ratio = torch.where(mask, torch.exp((new_lp - old).clamp(-20.0, 20.0)), zero)
    a = trainer.cfg.actor
    outside = mask & ((ratio < 1.0 - a.clip_ratio_low) | (ratio > 1.0 + a.clip_ratio_high))
    return Batch(
        tensors={
            "responses": batch["responses"],
            "response_mask": batch["response_mask"],
            "attention_mask": batch["attention_mask"],
            "old_log_probs": old,
            "log_probs_after": torch.where(mask, new_lp, zero),
            "ratio_after": ratio,
            "outside_clip": outside,
        },
        non_tensors={k: batch[k] for k in ("uid",) if k in batch},
    )


@dataclass
class TraceResult:
    html: Path
    markdown: Path
    views: list[StageView]
    metrics: dict[str, Any]
    records: list[Record]


def build_views(
    records: list[Record], tokenizer: Any, metrics: dict[str, Any], max_rows: int
) -> list[StageView]:
    decode = Decoder(tokenizer)
    views: list[StageView] = []
    prev: Batch | None = None
    for i, rec in enumerate(records, 1):
        views.append(stage_view(i, rec.stage, rec.batch, rec.elapsed_s, prev, decode, max_rows))
        prev = rec.batch
    step_time = float(metrics.get("timing_s/step", 0.0))
    views.append(metrics_view(len(views) + 1, metrics, step_time))
    return views


def run_trace(
    recipe: str | None,
    overrides: list[str],
    out_dir: Path,
    max_rows: int = 8,
    command: str = "turnrl trace",
) -> TraceResult:
    """One real step of the configured run, written to `out_dir/trace.html` and `trace.md`."""
    from turnrl.config import load_config
    from turnrl.errors import TurnrlInputError
    from turnrl.trainer.ppo import Trainer

    out_dir.mkdir(parents=True, exist_ok=True)
    given_dir = _given_run_dir(overrides)
    tmp = None if given_dir else tempfile.mkdtemp(prefix="turnrl-trace-")
    # a given run directory is traced at its latest checkpoint; its config.yaml is put back afterwards
    # so the trace's small-batch config never replaces the run's own
    saved = _read_bytes(Path(given_dir) / "config.yaml") if given_dir else None
    try:
        recorder = TraceRecorder()
        start = time.perf_counter()
        try:
            cfg = load_config(recipe, trace_overrides(overrides, tmp))
            trainer = Trainer(cfg, hooks=[recorder])
        except TurnrlInputError as err:  # bad input: one line; a failure inside the step keeps its traceback
            raise TraceSetupError(str(err).splitlines()[0] if str(err) else type(err).__name__) from err
        setup_s = time.perf_counter() - start
        try:
            metrics = trainer.step()  # the next step, as fit() runs it
            _record_after_update(trainer, recorder)
        finally:
            trainer.close()  # tool servers the rollout started, the roles, the (empty) loggers
        views = build_views(recorder.records, trainer.tokenizer, metrics, max_rows)
        header = _page_header(command, trainer, setup_s, cfg)
    finally:
        _clean_up(tmp, given_dir, saved)
    html_path, md_path = _write_pages(out_dir, views, header)
    return TraceResult(html_path, md_path, views, metrics, recorder.records)


def _given_run_dir(overrides: list[str]) -> str | None:
    """The run directory the user's `trainer.default_local_dir=` override names, if any."""
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("trainer.default_local_dir=")), None)


def _record_after_update(trainer: Any, recorder: TraceRecorder) -> None:
    """Record `after_update` for the last recorded batch that holds what it needs (if any does)."""
    last = next(
        (r.batch for r in reversed(recorder.records) if all(k in r.batch for k in AFTER_UPDATE_INPUTS)),
        None,
    )
    if last is not None:
        t0 = time.perf_counter()
        after = after_update(trainer, last)
        if after is not None:
            recorder.records.append(Record("after_update", after, time.perf_counter() - t0))


def _page_header(command: str, trainer: Any, setup_s: float, cfg: Any) -> dict[str, Any]:
    """What the pages show above the stages: the command, the step, the setup time, the config."""
    from turnrl.config import to_yaml

    return {
        "command": command,
        "step": trainer.state.global_step,
        "setup_s": setup_s,
        "config": to_yaml(cfg),
        "summary": config_summary(cfg),
    }


def _clean_up(tmp: str | None, given_dir: str | None, saved: bytes | None) -> None:
    """Remove the trace's own run directory, or put a given run's config.yaml back."""
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if given_dir and saved is not None:
        (Path(given_dir) / "config.yaml").write_bytes(saved)


def _write_pages(out_dir: Path, views: list[StageView], header: dict[str, Any]) -> tuple[Path, Path]:
    """Write trace.html and trace.md into `out_dir`; return their paths."""
    from turnrl.inspector.markdown import render_markdown
    from turnrl.inspector.page import render_html

    html_path, md_path = out_dir / "trace.html", out_dir / "trace.md"
    _write(html_path, render_html(views, header))
    _write(md_path, render_markdown(views, header))
    return html_path, md_path


def config_summary(cfg: Any) -> dict[str, str]:
    d, r, a = cfg.data, cfg.rollout, cfg.actor
    out = {
        "model": cfg.model.path,
        "estimator": cfg.algorithm.adv_estimator,
        "prompts x samples": f"{d.train_batch_size} x {r.n}",
        "max prompt / response tokens": f"{d.max_prompt_length} / {d.max_response_length}",
        "temperature": f"{r.temperature:g}",
        "clip range": f"[{1 - a.clip_ratio_low:g}, {1 + a.clip_ratio_high:g}]",
        "loss aggregation": a.loss_agg_mode,
        "agent mode": "on" if r.multi_turn.enable else "off",
    }
    return out


def _read_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


__all__ = [
    "TRACE_DEFAULTS",
    "Record",
    "TraceRecorder",
    "TraceResult",
    "TraceSetupError",
    "after_update",
    "build_views",
    "run_trace",
    "snapshot",
]
