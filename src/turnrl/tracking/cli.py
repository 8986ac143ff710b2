"""`turnrl report RUN_DIR`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "report",
        help="plot a run's metrics.jsonl into RUN_DIR/report/ (PNG + report.html)",
        description="Turn RUN_DIR/metrics.jsonl into PNG plots and RUN_DIR/report/report.html.",
    )
    r.add_argument("run_dir", help="the run directory (holds metrics.jsonl)")
    r.set_defaults(func=report_command)


def report_command(ns: argparse.Namespace) -> int:
    from turnrl.tracking.report import ReportError, make_report

    try:
        report = make_report(Path(ns.run_dir))
    except ReportError as err:
        print(f"turnrl report: {err}", file=sys.stderr)
        return 2
    for problem in report.problems:
        print(f"turnrl report: {problem}", file=sys.stderr)
    print(f"report: {report.html} ({len(report.plots)} plots)")
    return 0 if report.plots else 1
