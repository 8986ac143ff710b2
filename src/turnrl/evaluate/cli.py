"""`turnrl eval [recipe] [key=value ...] [--out DIR]`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from turnrl.errors import TurnrlInputError
from turnrl.trainer.cli import end_progress_bars, split_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="evaluate a model, run or checkpoint: greedy score, mean@n and pass@k per data source"
    )
    p.add_argument(
        "args",
        nargs="*",
        help="an optional recipe (a .yaml file or a built-in name), then key=value overrides; "
        "model.path=RUN_DIR alone evaluates a training run on its own validation data",
    )
    p.add_argument(
        "--out", default=None, help="output directory, new or empty (default: evals/<model>-<time>)"
    )
    p.set_defaults(func=run)


def fail(err: TurnrlInputError) -> int:
    end_progress_bars()
    print(f"turnrl eval: {err}", file=sys.stderr)
    return 2


def run(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from turnrl.evaluate.inputs import check_out_dir, default_out_dir, eval_config

    try:
        recipe, overrides = split_args(ns.args)
        cfg, train_run = eval_config(recipe, overrides)
        out = check_out_dir(Path(ns.out) if ns.out else default_out_dir(cfg, train_run))
    except TurnrlInputError as err:
        return fail(err)
    from turnrl.evaluate.metrics import format_table
    from turnrl.evaluate.run import evaluate

    # bad input is one line; anything else is a bug: keep its traceback
    try:
        summary = evaluate(cfg, out, train_run)
    except TurnrlInputError as err:
        return fail(err)
    metrics = summary["metrics"]
    print(format_table(metrics["overall"], metrics["per_data_source"]))
    print(f"eval directory: {out}")
    return 0
