"""`turnrl train [recipe.yaml] [key=value ...]`."""

from __future__ import annotations

import argparse
import logging
import sys

from turnrl.config import key_listing, load_config, to_yaml
from turnrl.config.loader import recipe_listing
from turnrl.errors import TurnrlInputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy (default: GRPO on the embedded model, built-in task)")
    p.add_argument(
        "args",
        nargs="*",
        help="an optional recipe (a .yaml file or a built-in name), then key=value overrides",
    )
    p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--list-keys", action="store_true", help="list every config key with its docstring")
    p.add_argument(
        "--list-recipes", action="store_true", help="list the built-in recipes (turnrl train NAME)"
    )
    p.set_defaults(func=run)


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    recipe = None
    if args and "=" not in args[0]:
        recipe, args = args[0], args[1:]
    return recipe, args


def fail(err: TurnrlInputError) -> int:
    end_progress_bars()
    print(f"turnrl train: {err}", file=sys.stderr)
    return 2


def end_progress_bars() -> None:
    """Close the step bar a run that failed mid-training left drawn on stderr, without a newline:
    the error then starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def run(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if ns.list_recipes:
        print("\n".join(recipe_listing("train")))
        return 0
    if ns.list_keys:
        print("\n".join(key_listing()))
        return 0
    try:
        recipe, overrides = split_args(ns.args)
        cfg = load_config(recipe, overrides)
    except TurnrlInputError as err:
        return fail(err)
    if ns.show_config:
        print(to_yaml(cfg))
        return 0
    from turnrl.trainer.ppo import Trainer

    # bad input (config, data, model, reward, tools) is one line; anything else is a bug: keep its traceback.
    # Some bad input only shows once training runs: a micro-batch too large for memory, a reward
    # function that raises or hangs on the first step (fit() has closed the trainer when it raises)
    try:
        run_dir = Trainer(cfg).fit()
    except TurnrlInputError as err:
        return fail(err)
    print(f"run directory: {run_dir}")
    return 0
