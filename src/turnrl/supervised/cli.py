"""`turnrl sft [recipe] [key=value ...]` and `turnrl rm [recipe.yaml] [key=value ...]`; an SFT recipe
is a .yaml file or the name of a shipped one (`turnrl sft search_sft`, `turnrl sft --list-recipes`)."""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial

from turnrl.errors import TurnrlInputError

HELP = {
    "sft": "supervised fine-tuning on chat conversations (a warm start for RL); writes <run>/model",
    "rm": "train a reward model on preference pairs (Bradley-Terry); writes <run>/model",
}


def register(sub: argparse._SubParsersAction) -> None:
    for command, text in HELP.items():
        p = sub.add_parser(command, help=text, description=text)
        recipe = "recipe (a .yaml file or a built-in name)" if command == "sft" else "recipe.yaml"
        p.add_argument("args", nargs="*", help=f"an optional {recipe}, then key=value overrides")
        p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
        p.add_argument("--list-keys", action="store_true", help="list every config key with its docstring")
        if command == "sft":
            p.add_argument(
                "--list-recipes", action="store_true", help="list the built-in SFT recipes (turnrl sft NAME)"
            )
        p.set_defaults(func=partial(run, command))


def run(command: str, ns: argparse.Namespace) -> int:
    from turnrl.config import key_listing, load_config, to_yaml
    from turnrl.config.loader import recipe_listing
    from turnrl.config.supervised_schema import RMConfig, SFTConfig
    from turnrl.supervised.checks import check_rm, check_sft
    from turnrl.trainer.cli import end_progress_bars, split_args

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    schema, check = (SFTConfig, check_sft) if command == "sft" else (RMConfig, check_rm)
    if getattr(ns, "list_recipes", False):
        print("\n".join(recipe_listing(command)))
        return 0
    if ns.list_keys:
        print("\n".join(key_listing(schema)))
        return 0
    # bad input (config, data, model, template) is one line; anything else is a bug: keep its traceback
    try:
        recipe, overrides = split_args(ns.args)
        cfg = load_config(recipe, overrides, schema=schema, check=check, command=command)
        if ns.show_config:
            print(to_yaml(cfg))
            return 0
        from turnrl.supervised.trainer import SupervisedTrainer

        run_dir = SupervisedTrainer(cfg).fit()
    except TurnrlInputError as err:
        end_progress_bars()
        print(f"turnrl {command}: {err}", file=sys.stderr)
        return 2
    print(f"model: {run_dir / 'model'}")
    print(f"run directory: {run_dir}")
    return 0
