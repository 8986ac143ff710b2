"""`turnrl report RUN_DIR`: a run's `metrics.jsonl` -> PNG plots and one HTML page in RUN_DIR/report/.

A report is most wanted when a run went wrong, so it reads what it can: a missing or empty
metrics file, a last line cut off by a killed run, or a bad line in the middle are reported
(on stderr and on the page) and everything readable is still plotted.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from turnrl.runtime import ensure_writable_dir
from turnrl.tracking.report_plots import PLOTS, Series, draw, matches

SUMMARY_KEYS = (
    "critic/score/mean",
    "val/test_score/mean",
    "val/accuracy",
    "val/format_rate",
    "response_length/mean",
    "actor/entropy",
    "actor/grad_norm",
    "perf/throughput",
    "timing_s/step",
)


class ReportError(ValueError):
    """The run directory cannot be reported on at all (the message names it)."""


@dataclass
class MetricsLog:
    series: Series = field(default_factory=dict)
    rows: int = 0
    problems: list[str] = field(default_factory=list)
    non_finite: dict[str, int] = field(default_factory=dict)


def _number(value: Any) -> float | None:
    """A plottable value: numbers, and the Tracker's spellings of non-finite floats."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if value is None:
        return math.nan  # the Tracker writes NaN as null
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return None


def read_metrics(path: Path) -> MetricsLog:
    log = MetricsLog()
    if path.is_dir():
        log.problems.append(f"no metrics file: {path} is a directory, not a file")
        return log
    if not path.is_file():
        log.problems.append(
            f"no metrics file: {path} does not exist (did the run log with trainer.logger=[jsonl]?)"
        )
        return log
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if not any(line.strip() for line in lines):
        log.problems.append(f"{path} is empty: the run stopped before its first step was logged")
        return log
    last = max(i for i, line in enumerate(lines) if line.strip())
    per_key: dict[str, dict[int, float]] = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            why = (
                "the last line is cut off (a run killed mid-write?)"
                if i == last
                else f"not valid JSON ({err.msg})"
            )
            log.problems.append(f"{path.name} line {i + 1}: {why}; skipped")
            continue
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            log.problems.append(f"{path.name} line {i + 1}: not an object with an integer 'step'; skipped")
            continue
        log.rows += 1
        step = row["step"]
        for k, v in row.items():
            x = _number(v)
            if k == "step" or x is None:
                continue
            if not math.isfinite(x):
                log.non_finite[k] = log.non_finite.get(k, 0) + 1
            # a resumed run logs the steps after its checkpoint again: the later value wins
            per_key.setdefault(k, {})[step] = x
    log.series = {k: sorted(v.items()) for k, v in per_key.items()}
    if log.rows == 0 and not log.problems:
        log.problems.append(f"{path} holds no metric rows")
    return log


@dataclass
class Report:
    html: Path
    plots: dict[str, list[str]]  # png file name -> metrics drawn
    problems: list[str]


def make_report(run_dir: Path) -> Report:
    """Write RUN_DIR/report/*.png and report.html; raises ReportError when RUN_DIR is unusable."""
    if not run_dir.exists():
        raise ReportError(f"run directory not found: {run_dir}")
    if not run_dir.is_dir():
        raise ReportError(f"not a directory: {run_dir} (give the run directory that holds metrics.jsonl)")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never ask for a display
    except ImportError:
        raise ReportError(
            "turnrl report draws with matplotlib, which is not installed: pip install matplotlib"
        ) from None
    log = read_metrics(run_dir / "metrics.jsonl")
    out = ensure_writable_dir(run_dir / "report", "report directory", ReportError)  # a read-only run
    out.mkdir(exist_ok=True)
    plots: dict[str, list[str]] = {}
    absent: list[str] = []
    for spec in PLOTS:
        name = f"{spec.slug}.png"
        drawn = draw(spec, log.series, out / name) if matches(spec, log.series) else []
        if drawn:
            plots[name] = drawn
        else:
            (out / name).unlink(missing_ok=True)  # a plot from an earlier report must not linger
            absent.append(spec.title)
    problems = list(log.problems)
    for k, n in sorted(log.non_finite.items()):
        problems.append(f"{k}: {n} non-finite value(s) (NaN/inf) not plotted")
    if log.series and not plots:
        problems.append("none of the metrics in the file is one that the report plots")
    elif log.rows and not log.series:  # rows whose values are all text or lists: the exit code says 1
        problems.append(f"{run_dir / 'metrics.jsonl'}: no metric holds a number, so there is nothing to plot")
    html = out / "report.html"
    html.write_text(render(run_dir, log, plots, absent, problems), encoding="utf-8")
    return Report(html, plots, problems)


# -- page --------------------------------------------------------------------------------------------
def _summary(series: Series) -> str:
    rows = []
    for k in SUMMARY_KEYS:
        pts = [(s, v) for s, v in series.get(k, []) if math.isfinite(v)]
        if pts:
            best = max(pts, key=lambda p: p[1])
            rows.append(
                f"<tr><td><code>{escape(k)}</code></td><td>{pts[0][1]:.4g}</td><td>{pts[-1][1]:.4g}</td>"
                f"<td>{best[1]:.4g} (step {best[0]})</td></tr>"
            )
    if not rows:
        return ""
    return (
        "<table><tr><th>metric</th><th>first</th><th>last</th><th>max</th></tr>" + "".join(rows) + "</table>"
    )


PAGE_STYLE = """body { font: 14px/1.5 system-ui, sans-serif; margin: 24px 32px; color: #1f2328; max-width: 1600px; }
h1 { font-size: 22px; margin: 0 0 4px; } code { font-size: 12.5px; }
.note { color: #656d76; }
.problems { border: 1px solid #cf222e; background: #ffebe9; padding: 8px 14px; border-radius: 8px; margin: 12px 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
figure { margin: 0; border: 1px solid #d0d7de; border-radius: 8px; padding: 8px; }
figure img { width: 100%; } figcaption { color: #656d76; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #d0d7de; padding: 2px 10px; text-align: left; }"""


def render(
    run_dir: Path, log: MetricsLog, plots: dict[str, list[str]], absent: list[str], problems: list[str]
) -> str:
    """The report page: the problems, the summary table, the plots, and what was not plotted."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>turnrl report · {escape(run_dir.name)}</title>
<style>
{PAGE_STYLE}
</style></head><body>
<h1>turnrl report · {escape(run_dir.name)}</h1>
<p class="note">{escape(str(run_dir.resolve()))} · {log.rows} rows, {_span(log.series)} · made {time.strftime("%Y-%m-%d %H:%M")}</p>
{_problems_html(problems)}
{_summary(log.series)}
<div class="grid">{_figures_html(plots)}</div>
{_absent_html(absent, log.series)}
{_others_html(log.series, plots)}
</body></html>
"""


def _span(series: Series) -> str:
    """The steps the metrics cover: "steps 1-40", or "no steps"."""
    steps = sorted({s for pts in series.values() for s, _ in pts})
    return f"steps {steps[0]}-{steps[-1]}" if steps else "no steps"


def _problems_html(problems: list[str]) -> str:
    """The boxed list of what was missing or unreadable (empty when nothing was)."""
    if not problems:
        return ""
    return (
        '<div class="problems"><b>Missing or unreadable:</b><ul>'
        + "".join(f"<li>{escape(p)}</li>" for p in problems)
        + "</ul></div>"
    )


def _figures_html(plots: dict[str, list[str]]) -> str:
    """One figure per plot file, captioned with the metrics it draws."""
    return "".join(
        f'<figure><img src="{escape(name)}" alt="{escape(name)}"><figcaption>{escape(", ".join(keys))}</figcaption></figure>'
        for name, keys in plots.items()
    )


def _absent_html(absent: list[str], series: Series) -> str:
    """The plots this run has no metrics for (not said of a file with no metrics at all)."""
    if not (absent and series):
        return ""
    return f'<p class="note">Not in this run (no plot): {escape("; ".join(absent))}.</p>'


def _others_html(series: Series, plots: dict[str, list[str]]) -> str:
    """The logged metrics no plot draws, folded away (empty when every metric is plotted)."""
    plotted = {k for keys in plots.values() for k in keys}
    others = sorted(k for k in series if k not in plotted)
    if not others:
        return ""
    return (
        f'<details><summary>{len(others)} other metrics (not plotted)</summary><p class="note">'
        + ", ".join(f"<code>{escape(k)}</code>" for k in others)
        + "</p></details>"
    )
