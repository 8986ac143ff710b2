"""`turnrl compare --base A [A ...] --new B [B ...]`: the paired gain of B over A on the same
validation questions, per data source and overall, with its 95 % bootstrap interval
(`turnrl.evaluate.intervals`).

Each A or B is one seed's answers: a training run directory (its newest `val_samples/step_<N>.jsonl`),
one such file, or a `turnrl eval` output directory (its `samples.jsonl`, the greedy pass). Give one
base per new run (paired by position: seed i of RL against seed i of SFT) or one base for all (the
untrained model). Questions are matched by `(data_source, index)`; every file must hold the same
questions, or the command names the file and what is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.errors import TurnrlInputError
from turnrl.evaluate.intervals import LEVEL, Interval, paired_interval

ALL = "all"
Key = tuple[str, Any]
"""A question: (data_source, index)."""


class CompareError(TurnrlInputError):
    """A sample file that cannot be read or paired; the message names it."""


def sample_file(path: Path) -> Path:
    """The samples `path` stands for (module docstring)."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise CompareError(f"{path}: no such file or directory")
    if (path / "samples.jsonl").is_file():
        return path / "samples.jsonl"
    steps = sorted(
        (int(m.group(1)), f)
        for f in (path / "val_samples").glob("step_*.jsonl")
        if (m := re.fullmatch(r"step_(\d+)\.jsonl", f.name))
    )
    if not steps:
        raise CompareError(
            f"{path}: neither a samples.jsonl (turnrl eval) nor val_samples/step_<N>.jsonl (a run)"
        )
    return steps[-1][1]


def _value(row: dict[str, Any], field: str, threshold: float | None, where: str) -> float:
    value = row.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CompareError(f"{where}: field {field!r} is {value!r}, not a finite number")
    return float(value >= threshold) if threshold is not None else float(value)


def read_scores(path: Path, field: str = "score", threshold: float | None = None) -> dict[Key, float]:
    """Per question, its mean `field` over the rows that answered it (the greedy pass of an eval
    file). `threshold`: a row counts 1 when `field >= threshold`, else 0."""
    per: dict[Key, list[float]] = defaultdict(list)
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise CompareError(f"{where}: not JSON ({err.msg})") from None
            if not isinstance(row, dict) or "index" not in row:
                raise CompareError(f"{where}: a sample row needs an 'index'")
            if row.get("pass", "greedy") != "greedy":
                continue
            per[(str(row.get("data_source", "")), row["index"])].append(_value(row, field, threshold, where))
    if not per:
        raise CompareError(f"{path}: no greedy sample rows")
    return {k: float(np.mean(v)) for k, v in per.items()}


def by_index_if_unnamed(runs: list[dict[Key, float]], names: list[Path]) -> list[dict[Key, float]]:
    """Where some file's rows carry no `data_source` (samples written before they did), every run's
    questions are paired by `index` alone."""
    if not any(all(source == "" for source, _ in run) for run in runs):
        return runs
    out = []
    for run, name in zip(runs, names, strict=True):
        plain = {("", index): v for (_, index), v in run.items()}
        if len(plain) != len(run):
            raise CompareError(
                f"{name}: an index stands in several data sources; pair it with files that name them"
            )
        out.append(plain)
    return out


def aligned(runs: list[dict[Key, float]], names: list[Path]) -> tuple[list[Key], np.ndarray]:
    """The questions every run answered, in one order, and the scores as (runs, questions)."""
    keys = sorted(runs[0], key=str)
    for run, name in zip(runs[1:], names[1:], strict=True):
        missing, extra = set(runs[0]) - set(run), set(run) - set(runs[0])
        if missing or extra:
            raise CompareError(
                f"{name}: not the same questions as {names[0]} ({len(missing)} missing, {len(extra)} "
                f"others; first: {sorted(missing or extra, key=str)[0]}): compare runs of one validation set"
            )
    return keys, np.array([[run[k] for k in keys] for run in runs])


def compare(
    base: list[Path], new: list[Path], field: str = "score", threshold: float | None = None,
    resamples: int = 10_000, seed: int = 0,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Per data source (and `all`): the pooled interval and one per new run."""
    if len(base) not in (1, len(new)):
        raise CompareError(f"--base: give one run or {len(new)} (one per --new run), got {len(base)}")
    files = [sample_file(p) for p in [*base, *new]]
    keys, scores = aligned(
        by_index_if_unnamed([read_scores(f, field, threshold) for f in files], files), files
    )
    a, b = scores[: len(base)], scores[len(base) :]
    sources = sorted({k[0] for k in keys})
    groups = {ALL: list(range(len(keys)))}
    if len(sources) > 1:
        groups.update({s: [i for i, k in enumerate(keys) if k[0] == s] for s in sources})
    out = {}
    for name, cols in groups.items():
        pooled = paired_interval(a[:, cols], b[:, cols], resamples, seed)
        seeds = [
            paired_interval(a[min(i, len(a) - 1), cols], b[i, cols], resamples, seed) for i in range(len(b))
        ]
        out[name] = {"pooled": pooled, "per_seed": seeds if len(b) > 1 else []}
    return out


def format_table(result: dict[str, dict[str, Any]]) -> str:
    head = f"| data source | questions | seeds | base | new | new - base, points ({LEVEL * 100:.0f} % interval) | gain shown |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for name, r in result.items():
        p: Interval = r["pooled"]
        per = (
            "; per seed: "
            + ", ".join(
                f"{100 * s.diff:+.1f} ({100 * s.low:+.1f} to {100 * s.high:+.1f})" for s in r["per_seed"]
            )
            if r["per_seed"]
            else ""
        )
        lines.append(
            f"| {name} | {p.questions} | {p.seeds} | {p.base:.3f} | {p.new:.3f} | {p.points()}{per} | "
            f"{'yes' if p.shown else 'no: not shown'} |"
        )
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="the paired gain of one model over another on the same validation questions, with a 95 %% interval",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--base",
        nargs="+",
        type=Path,
        required=True,
        help="the base condition: one run, or one per --new run",
    )
    p.add_argument("--new", nargs="+", type=Path, required=True, help="the new condition: one run per seed")
    p.add_argument("--field", default="score", help="the numeric sample field compared (default: score)")
    p.add_argument(
        "--threshold", type=float, default=None, help="count a sample 1 when field >= this, else 0"
    )
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default 0)")
    p.add_argument("--json", type=Path, default=None, help="also write the result here as JSON")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    try:
        result = compare(ns.base, ns.new, ns.field, ns.threshold, ns.resamples, ns.seed)
    except (TurnrlInputError, ValueError) as err:
        print(f"turnrl compare: {err}", file=sys.stderr)
        return 2
    print(format_table(result))
    if ns.json:
        data = {
            k: {"pooled": asdict(v["pooled"]), "per_seed": [asdict(s) for s in v["per_seed"]]}
            for k, v in result.items()
        }
        ns.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0
