"""`turnrl data NAME (--input FILE ... | --from-hub) --out DIR`: the command around `convert`; and
`turnrl data task NAME --out DIR`, `turnrl data search_sft --out DIR`, `turnrl data code_sft --out DIR`,
`turnrl data harbor_sft --out DIR`: the built-in tasks' files."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from turnrl.data.dataset import DataError
from turnrl.data.prepare.sources import HubSplit, Part
from turnrl.errors import TurnrlInputError

if TYPE_CHECKING:
    from turnrl.data.prepare import Converted, Recipe

SHOWN_SKIPS = 10  # skipped rows listed one by one; the rest are counted
SEARCH_SFT = "search_sft"
CODE_SFT = "code_sft"
HARBOR_SFT = "harbor_sft"
TASK = "task"
GENERATORS = (TASK, SEARCH_SFT, CODE_SFT, HARBOR_SFT)
TAKEN_BY = {
    "n": (SEARCH_SFT, CODE_SFT, HARBOR_SFT),
    "seed": GENERATORS,
    "topk": (SEARCH_SFT,),
    "retry_fraction": (SEARCH_SFT, CODE_SFT),
    "two_hop_share": (SEARCH_SFT,),
    "opener": (SEARCH_SFT,),
    "cache_dir": (SEARCH_SFT,),
    "problems": (CODE_SFT,),
}
"""Each generator option and the generators that take it: the one table the refusals are worded from."""
GENERATOR_FLAGS = tuple(TAKEN_BY)
VERIFIERS = "verifiers:"


class _Datasets(list):
    """The dataset names argparse accepts: these, and any `verifiers:<env>` (checked when it loads)."""

    def __contains__(self, name: object) -> bool:
        return (isinstance(name, str) and name.startswith(VERIFIERS)) or super().__contains__(name)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `turnrl data` and its options to the CLI's subcommands."""
    from turnrl.data.prepare import RECIPES

    p = sub.add_parser(
        "data",
        help="convert a public dataset's files (gsm8k, MATH, nq/hotpotqa) to verl-format parquet, "
        "write a built-in task's files (task NAME), or search-, code- or coding-agent demonstrations "
        "(search_sft, code_sft, harbor_sft)",
        description="Convert GSM8K, MATH or FlashRAG QA files into the verl-format parquet files that "
        "verl's and Search-R1's preprocessing scripts write (train.parquet, test.parquet); with `task NAME`, "
        "write a built-in task's train.jsonl and val.jsonl (and its corpus.jsonl); or, with search_sft, "
        "write scripted search-agent (search_sft), code-agent (code_sft) or coding-agent episodes from the "
        "built-in Harbor tasks' solutions (harbor_sft) for `turnrl sft` "
        "(train.jsonl). See docs/data.md.",
    )
    # the help lists the options in the order they are added: keep these calls in this order
    _add_dataset_args(p, [*RECIPES, TASK, SEARCH_SFT, CODE_SFT, HARBOR_SFT, f"{VERIFIERS}ENV"])
    _add_output_args(p)
    _add_generator_args(p)
    p.set_defaults(func=data_command)


def _add_dataset_args(p: argparse.ArgumentParser, datasets: list[str]) -> None:
    """The dataset (converter or generator), a task's NAME, and where the rows come from."""
    p.add_argument(
        "dataset",
        choices=_Datasets(datasets),
        help="which converter or generator; verifiers:ENV writes a verifiers environment's tasks",
    )
    p.add_argument(
        "name",
        nargs="?",
        help="task: the built-in task (addition, calculator, code, search) or reasoning_gym:<dataset>",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--input",
        action="append",
        metavar="FILE",
        help="a .jsonl, .json or .parquet file of the dataset (repeatable); its split (train, test, dev) "
        "and, for nq_hotpotqa, its data set (nq/train.jsonl) are read from its name",
    )
    src.add_argument(
        "--from-hub", action="store_true", help="load from the Hugging Face hub (needs `datasets`)"
    )


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """Where the files go, the converters' split and data_source, and a task's arguments."""
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (new or empty)")
    p.add_argument("--split", choices=("train", "test"), help="the split of every --input file")
    p.add_argument("--data-source", help="the data_source of every row (default: the upstream script's)")
    p.add_argument("--overwrite", action="store_true", help="replace the split files in a non-empty --out")
    p.add_argument(
        "--arg",
        action="append",
        metavar="KEY=VALUE",
        help="task: one of the task's arguments, as data.task_args.KEY (repeatable; the value is read "
        "as YAML: size=200, allow_negation=true)",
    )


def _add_generator_args(p: argparse.ArgumentParser) -> None:
    """The generators' options (GENERATOR_FLAGS), in their own help section."""
    gen = p.add_argument_group("search_sft (demonstrations from the built-in corpus; no --input)")
    gen.add_argument(
        "--n",
        type=int,
        help="demonstrations to make (default: search_sft every training question, code_sft 512, "
        "harbor_sft one per training task)",
    )
    gen.add_argument(
        "--seed",
        type=int,
        help="task, code_sft, harbor_sft: the rows' seed; search_sft: orders the questions and picks the "
        "wording (default 0)",
    )
    gen.add_argument("--topk", type=int, help="passages per search, as the search tool's topk (default 3)")
    gen.add_argument(
        "--retry-fraction",
        type=float,
        help="search_sft: share of first queries that leave the entity's name out, miss, and are followed "
        "by a second, named search (default 0.1); code_sft: share of demonstrations that first run "
        "another problem's program of the family, see the wrong output, then run and answer with the "
        "right one (default 0)",
    )
    gen.add_argument(
        "--two-hop-share",
        type=float,
        help="search_sft: share of the demonstrations that are two-hop (default 0.5; the training "
        "questions alone hold about a quarter)",
    )
    gen.add_argument(
        "--opener",
        help="search_sft: how each episode's first thought begins: 'joined' (default: it first names what "
        "the question is about, the entity or the bridge's description, a two-hop description and 'this "
        "takes two searches' in one sentence), 'subject' (the same in two sentences) or 'plain' (neither)",
    )
    gen.add_argument("--cache-dir", help="where the built-in index is built once (default: turnrl's cache)")
    gen.add_argument(
        "--problems",
        help="code_sft: demonstrate only these training problems (comma-separated names, e.g. "
        "list_sum,reverse; default every training problem): RL can then train on the others",
    )


def data_command(ns: argparse.Namespace) -> int:
    try:
        return run(ns)
    except TurnrlInputError as err:  # a DataError, an unknown task, a question no demonstration scripts
        print(f"turnrl data: {err}", file=sys.stderr)
        return 2


def run(ns: argparse.Namespace) -> int:
    """Run `turnrl data` on parsed arguments: a verifiers environment, a generator, or a converter."""
    if ns.dataset.startswith(VERIFIERS):
        from turnrl.data.prepare.verifiers import run_verifiers

        return run_verifiers(ns)
    given = [k for k in GENERATOR_FLAGS if getattr(ns, k) is not None]
    _check_task_only_args(ns)
    if ns.dataset in GENERATORS:
        return _run_generator(ns, given)
    _refuse_others_flags(ns.dataset, given)
    return _run_converter(ns)


def _refuse_others_flags(dataset: str, given: list[str]) -> None:
    """One line naming the generator options given that `dataset` does not take, and what takes them
    (`TAKEN_BY`): `--n: only for search_sft, code_sft and harbor_sft`; `--topk, --opener: only for search_sft`."""
    foreign: dict[tuple[str, ...], list[str]] = {}
    for key in given:
        if dataset not in TAKEN_BY[key]:
            foreign.setdefault(TAKEN_BY[key], []).append(f"--{key.replace('_', '-')}")
    if foreign:
        raise DataError(
            "; ".join(f"{', '.join(flags)}: only for {_listed(takers)}" for takers, flags in foreign.items())
        )


def _listed(names: tuple[str, ...]) -> str:
    """`search_sft`, `search_sft and code_sft`, `task, search_sft and code_sft`."""
    return " and ".join((", ".join(names[:-1]), names[-1])) if len(names) > 1 else names[0]


def _check_task_only_args(ns: argparse.Namespace) -> None:
    """A NAME and --arg belong to `turnrl data task` alone."""
    if ns.name is not None and ns.dataset != TASK:
        raise DataError(
            f"{ns.dataset}: unexpected argument '{ns.name}' (a NAME is only for `turnrl data task`)"
        )
    if getattr(ns, "arg", None) and ns.dataset != TASK:
        raise DataError(f"{ns.dataset}: --arg is only for turnrl data task NAME")


def _run_generator(ns: argparse.Namespace, given: list[str]) -> int:
    """task, search_sft, code_sft: rows made from built-in data, so no converter option applies."""
    if ns.input or ns.from_hub or ns.split or ns.data_source:
        what = "the built-in corpus" if ns.dataset == SEARCH_SFT else "the built-in task"
        raise DataError(
            f"{ns.dataset} generates its rows from {what}: --input, --from-hub, --split and "
            "--data-source do not apply"
        )
    from turnrl.data.prepare import tasks

    _refuse_others_flags(ns.dataset, given)
    if ns.dataset == SEARCH_SFT:
        return tasks.run_search_sft(ns)
    if ns.dataset == CODE_SFT:
        return tasks.run_code_sft(ns)
    if ns.dataset == HARBOR_SFT:
        return tasks.run_harbor_sft(ns)
    return tasks.run_task(ns)


def _run_converter(ns: argparse.Namespace) -> int:
    """Convert the --input files (or the hub's splits) with the dataset's recipe; write the parquet files."""
    from turnrl.data.prepare import RECIPES, convert
    from turnrl.data.prepare.output import check_out_dir

    if not ns.input and not ns.from_hub:
        raise DataError(
            f"{ns.dataset}: give the dataset's files with --input FILE (repeatable), or --from-hub"
        )
    recipe, out = RECIPES[ns.dataset], Path(ns.out)
    if ns.data_source is not None and ns.data_source not in recipe.sources:
        raise DataError(f"--data-source '{ns.data_source}' is not one of {', '.join(recipe.sources)}")
    if ns.from_hub and ns.split:
        raise DataError("--split applies to --input files; --from-hub reads the upstream splits")
    check_out_dir(out, ns.overwrite)  # before reading: a refused --out costs nothing
    result = convert(recipe, _source_parts(ns, recipe))
    _print_skipped(result.skipped)
    if not result.splits:
        raise DataError(f"no row of {result.read} could be converted; nothing written to {out}")
    _write_converted(ns.dataset, result, out)
    return 0


def _source_parts(ns: argparse.Namespace, recipe: Recipe) -> list[Part]:
    """The parts `convert` reads: the hub's splits (--from-hub) or the --input files."""
    from turnrl.data.prepare.sources import file_parts, hub_parts

    if ns.from_hub:
        return hub_parts(_hub_layout(recipe.hub, ns.data_source))
    return file_parts(ns.input, recipe.sources, recipe.default_source, ns.split, ns.data_source)


def _write_converted(dataset: str, result: Converted, out: Path) -> None:
    """Write the converted splits to `out` as parquet and print what each file holds."""
    from turnrl.data.prepare.output import to_table, write_splits

    tables = {split: to_table(rows, f"{split}.parquet") for split, rows in result.splits.items()}
    paths = write_splits(tables, out)
    print(f"{dataset}: read {result.read} rows, skipped {len(result.skipped)}")
    for path in paths:
        split = path.stem
        per_source = ", ".join(f"{s} {n}" for (sp, s), n in result.written.items() if sp == split)
        print(f"  {path}: {len(result.splits[split])} rows ({per_source})")


def _hub_layout(layout: tuple[HubSplit, ...], data_source: str | None) -> tuple[HubSplit, ...]:
    """With --data-source, MATH is written under that name; Search-R1's sets are limited to that set."""
    if data_source is None:
        return layout
    if len({h.data_source for h in layout}) == 1:
        return tuple(dataclasses.replace(h, data_source=data_source) for h in layout)
    return tuple(h for h in layout if h.data_source == data_source)


def _print_skipped(skipped: list[str]) -> None:
    for line in skipped[:SHOWN_SKIPS]:
        print(f"turnrl data: skipped {line}", file=sys.stderr)
    if len(skipped) > SHOWN_SKIPS:
        print(f"turnrl data: ... and {len(skipped) - SHOWN_SKIPS} more skipped rows", file=sys.stderr)
