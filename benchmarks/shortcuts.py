"""Shortcut baselines on a run's validation rows: the number a learning claim must beat.

    python benchmarks/shortcuts.py [RECIPE] [key=value ...]

It builds the validation rows a `turnrl train RECIPE key=value ...` run would validate on (its
`data.task`, `data.task_args` and `trainer.seed`, or `data.val_files`), then scores each shortcut of
`turnrl.evaluate.shortcuts` with the task's own scorer, and prints accuracy and format apart:

    python benchmarks/shortcuts.py gym_chain_sum trainer.seed=1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from turnrl.config import load_config
from turnrl.errors import TurnrlInputError
from turnrl.evaluate.shortcuts import rules_for, score_rules
from turnrl.rewards.registry import BUILTIN, resolve
from turnrl.tasks import get, scorers


def validation_rows(cfg) -> list[dict]:
    if cfg.data.val_files:
        return [
            json.loads(x) for f in cfg.data.val_files for x in Path(f).read_text().splitlines() if x.strip()
        ]
    return get(cfg.data.task).rows("val", cfg.trainer.seed, **dict(cfg.data.task_args))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="shortcuts.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("args", nargs="*", help="an optional recipe, then key=value overrides")
    args = parser.parse_args(argv).args
    recipe = args[0] if args and "=" not in args[0] else None
    try:
        cfg = load_config(recipe, [a for a in args if "=" in a])
        rows = validation_rows(cfg)
    except (TurnrlInputError, OSError, ValueError) as err:  # a bad recipe, key, task argument or file
        print(f"shortcuts.py: {err}", file=sys.stderr)
        return 1
    if not rows:
        print("shortcuts.py: the run would validate on no rows", file=sys.stderr)
        return 1
    scorer = resolve(rows[0]["data_source"], table={**BUILTIN, **scorers()})
    results = score_rules(rows, scorer, rules_for(rows))
    print(f"{len(rows)} validation rows of {cfg.data.task} (seed {cfg.trainer.seed})\n")
    print("| shortcut | accuracy | format |\n|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['acc']:.3f} | {r['formatted']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
