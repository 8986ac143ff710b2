"""`turnrl trace [recipe.yaml] [key=value ...]`."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser(
        "trace",
        help="run one training step on a small batch and show every stage's tensors (HTML + Markdown)",
        description="Run one real training step (2 prompts x 2 samples unless overridden) and write "
        "trace.html (self-contained) and trace.md.",
    )
    t.add_argument("args", nargs="*", help="an optional recipe.yaml, then key=value overrides")
    t.add_argument("--out", default=".", help="directory for trace.html and trace.md (default: here)")
    t.add_argument("--samples", type=int, default=8, help="rows shown in detail per stage (default 8)")
    t.set_defaults(func=trace_command)


def trace_command(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if ns.samples < 1:
        print(f"turnrl trace: --samples must be at least 1, got {ns.samples}", file=sys.stderr)
        return 2
    recipe, overrides = None, list(ns.args)
    if overrides and "=" not in overrides[0]:
        recipe, overrides = overrides[0], overrides[1:]
    command = shlex.join(["turnrl", "trace", *ns.args])
    from turnrl.inspector.trace import TraceSetupError, run_trace
    from turnrl.runtime import ensure_writable_dir

    try:
        ensure_writable_dir(Path(ns.out), "--out", TraceSetupError)  # before the step is set up
        result = run_trace(recipe, overrides, Path(ns.out), ns.samples, command)
    except TraceSetupError as err:
        print(f"turnrl trace: {err}", file=sys.stderr)
        return 2
    print(f"trace: {result.html}")
    print(f"summary: {result.markdown}")
    return 0
