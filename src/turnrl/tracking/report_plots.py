"""Which plots a run report draws, and drawing them (matplotlib, no display needed).

A plot is drawn only when at least one of its metrics is in the run; the names follow
`metrics.jsonl` (verl's names), so a run that has no KL term simply gets no KL plot.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Series = dict[str, list[tuple[int, float]]]  # metric -> (step, value), sorted by step


@dataclass(frozen=True)
class PlotSpec:
    slug: str
    title: str
    ylabel: str
    lines: str  # regular expression over metric names: every match is one line
    band: tuple[str, str] | None = None  # (min, max) metrics shaded around the lines
    stacked: bool = False  # stack the matches (stage times add up to the step time)
    total: str | None = None  # drawn as a line over the stack


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "score",
        "Score (train mean, min-max band) and validation score",
        "score",
        r"critic/score/mean|val/test_score/.+",
        band=("critic/score/min", "critic/score/max"),
    ),
    PlotSpec(
        "skill_format",
        "Validation accuracy (skill) and format rate (an answer could be parsed)",
        "rate",
        r"val/(accuracy|format_rate)(/.+)?",
    ),
    PlotSpec("reward_extra", "Reward components", "mean", r"reward_extra/.+/mean"),
    # turnrl live serve: the step after policy version v trains on sessions of v and earlier
    PlotSpec(
        "live_reward", "Live: the clients' mean reward of the sessions trained", "reward", r"live/reward/mean"
    ),
    PlotSpec(
        "live_sessions",
        "Live: sessions trained, dropped as stale, open; the policy version trained from",
        "count",
        r"live/(sessions|dropped/stale|open_sessions|policy_version)",
    ),
    PlotSpec("kl", "KL to the reference / old policy", "KL", r"actor/ppo_kl|actor/kl_loss|critic/kl"),
    PlotSpec("entropy", "Policy entropy (nats per token)", "entropy", r"actor/entropy"),
    PlotSpec(
        "response_length",
        "Response length (model tokens; mean, min-max band)",
        "tokens",
        r"response_length/mean|prompt_length/mean",
        band=("response_length/min", "response_length/max"),
    ),
    PlotSpec("truncation", "Responses cut at the length budget", "fraction", r"response_length/clip_ratio"),
    PlotSpec(
        "clip_fraction",
        "Clip fraction (tokens where the clip decides the loss)",
        "fraction",
        r"actor/pg_clipfrac|actor/pg_clipfrac_lower|critic/vf_clipfrac",
    ),
    PlotSpec("grad_norm", "Gradient norm (before clipping)", "norm", r"(actor|critic|sft|rm)/grad_norm"),
    PlotSpec("loss", "Losses", "loss", r"actor/pg_loss|critic/vf_loss|actor/kl_loss"),
    # turnrl sft / turnrl rm
    PlotSpec(
        "supervised_loss", "SFT / reward-model loss (train, validation)", "loss", r"(val/)?(sft|rm)/loss"
    ),
    PlotSpec("sft_tokens", "SFT: assistant tokens per step (the loss denominator)", "tokens", r"sft/tokens"),
    PlotSpec(
        "rm_accuracy",
        "Reward model: pairs ranked right (train, validation)",
        "fraction",
        r"(val/)?rm/accuracy",
    ),
    PlotSpec("rm_margin", "Reward model: r(chosen) - r(rejected)", "margin", r"(val/)?rm/margin"),
    PlotSpec(
        "advantages",
        "Advantages (mean, min-max band)",
        "advantage",
        r"critic/advantages/mean",
        band=("critic/advantages/min", "critic/advantages/max"),
    ),
    PlotSpec(
        "logprob_gap",
        "Rollout vs trainer log-prob gap",
        "|log p| difference",
        r"rollout_corr/abs_diff_mean|rollout_corr/abs_diff_max",
    ),
    PlotSpec("lr", "Learning rate", "lr", r"(actor|critic|sft|rm)/lr"),
    PlotSpec(
        "timing",
        "Time per stage (stacked) and per step",
        "seconds",
        r"timing_s/(?!step$|validate$).+",
        stacked=True,
        total="timing_s/step",
    ),
    PlotSpec("validation_time", "Validation time", "seconds", r"timing_s/validate"),
    PlotSpec("throughput", "Throughput (tokens per second)", "tokens/s", r"perf/throughput"),
    PlotSpec("memory", "Peak memory of the trainer process", "GiB", r"perf/max_(rss|memory_allocated)_gb"),
)


def matches(spec: PlotSpec, series: Series) -> list[str]:
    pattern = re.compile(spec.lines)
    return [k for k in series if pattern.fullmatch(k)]


def _finite(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(s, v) for s, v in points if math.isfinite(v)]


def draw(spec: PlotSpec, series: Series, out: Path) -> list[str]:
    """Draw one plot into `out` (PNG); returns the metrics drawn (empty: nothing to draw)."""
    from matplotlib.figure import Figure

    keys = matches(spec, series)
    keys = [k for k in keys if _finite(series[k])]
    if not keys:
        return []
    fig = Figure(figsize=(7.2, 3.6), dpi=110, layout="constrained")
    ax = fig.subplots()
    if spec.stacked:
        _stack(ax, keys, series, spec.total)
    else:
        for k in keys:
            pts = _finite(series[k])
            style = "o-" if len(pts) < 30 else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, markersize=3, linewidth=1.4, label=k)
        if spec.band:
            _band(ax, series, spec.band)
    ax.set_title(spec.title, fontsize=11)
    ax.set_xlabel("step")
    ax.set_ylabel(spec.ylabel)
    ax.grid(alpha=0.3)
    if len(keys) > 1 or spec.stacked:
        ax.legend(fontsize=8, loc="best")
    fig.savefig(out)
    return keys


def _band(ax: Axes, series: Series, band: tuple[str, str]) -> None:
    lo, hi = (dict(_finite(series.get(k, []))) for k in band)
    steps = sorted(set(lo) & set(hi))
    if steps:
        ax.fill_between(steps, [lo[s] for s in steps], [hi[s] for s in steps], alpha=0.15)


def _stack(ax: Axes, keys: list[str], series: Series, total: str | None) -> None:
    per_key = {k: dict(_finite(series[k])) for k in keys}
    steps = sorted(set().union(*per_key.values()))
    ys = [[per_key[k].get(s, 0.0) for s in steps] for k in keys]
    labels = [k.split("/", 1)[-1] for k in keys]
    ax.stackplot(steps, ys, labels=labels, alpha=0.8)
    if total and total in series:
        pts = _finite(series[total])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k-", linewidth=1.2, label="step")
