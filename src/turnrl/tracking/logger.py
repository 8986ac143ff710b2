"""Metric sinks: a compact console line, `metrics.jsonl` (one JSON object per step), and the
optional TensorBoard and wandb sinks of `turnrl.tracking.sinks`."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from tqdm import tqdm

from turnrl.tracking.sinks import Sink, make_sinks, scalars

log = logging.getLogger(__name__)

CONSOLE_KEYS = (
    "critic/score/mean",
    "val/test_score/mean",
    "val/accuracy",
    "val/format_rate",
    "response_length/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "perf/throughput",
)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def split_rows(text: str, step: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows of steps <= `step`, rows of later steps); a line that is no metrics row (a JSON object
    whose `step`, if any, is an integer) belongs to neither: a run killed mid-write leaves one at
    the end, anything else put there another."""
    kept: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        row_step = row.get("step", 0)
        if not isinstance(row_step, int) or isinstance(row_step, bool):
            continue
        (kept if row_step <= step else later).append(row)
    return kept, later


class Tracker:
    def __init__(
        self,
        run_dir: Path,
        sinks: list[str],
        project: str = "turnrl",
        experiment: str = "turnrl",
        config: dict[str, Any] | None = None,
    ):
        self.sinks = set(sinks)
        self.path = run_dir / "metrics.jsonl"
        # optional sinks first: a missing package fails before any file is opened
        self._extra: list[Sink] = make_sinks(list(sinks), run_dir, project, experiment, config)
        self._fh = self.path.open("a", encoding="utf-8") if "jsonl" in self.sinks else None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        if self._fh:
            # one write + flush per line: a run killed mid-step leaves at most one partial line
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        if "console" in self.sinks:
            shown = [
                f"{k.split('/', 1)[-1] if k.startswith('critic/') else k}={metrics[k]:.4g}"
                for k in CONSOLE_KEYS
                if k in metrics
            ]
            shown += [
                f"{k}={v:.4g}"
                for k, v in metrics.items()
                if k.startswith("val/test_score/") and k != "val/test_score/mean"
            ]
            tqdm.write(f"step {step}: " + "  ".join(shown))
        if self._extra:
            values = scalars(metrics)
            for sink in self._extra:
                sink.log(values, step)

    def rewind(self, step: int) -> int:
        """A resume from checkpoint `step`: rows of later steps (logged before the run died, about
        to be logged again) move to `metrics.replayed.jsonl`, and a line cut off mid-write is
        dropped, so `metrics.jsonl` holds each step once. Returns the number of rows moved."""
        if self._fh is None or not self.path.is_file():
            return 0
        self._fh.close()
        text = self.path.read_text(encoding="utf-8", errors="replace")  # bytes not UTF-8: no row
        kept, replayed = split_rows(text, step)
        dropped = sum(1 for line in text.splitlines() if line.strip()) - len(kept) - len(replayed)
        if dropped:
            log.warning(
                "%s: dropped %d line(s) that are no metrics row (not a JSON object with an integer "
                "step; a run killed mid-write leaves one)",
                self.path,
                dropped,
            )
        if replayed:
            with (self.path.parent / "metrics.replayed.jsonl").open("a", encoding="utf-8") as f:
                f.writelines(json.dumps({**r, "replayed_after_resume_from": step}) + "\n" for r in replayed)
        tmp = self.path.with_suffix(".jsonl.tmp")
        try:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")
        return len(replayed)

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None
        for sink in self._extra:
            sink.close()
        self._extra = []
