"""`turnrl data gsm8k|math|nq_hotpotqa`: public datasets' own files -> verl-format parquet.

Each converter writes the rows the reference preprocessing script writes, field for field
(verl's `examples/data_preprocess/gsm8k.py` and `math_dataset.py`, Search-R1's
`scripts/data_process/nq_search.py` and its nq+hotpotqa merge), so a model trained or evaluated on
those files sees the same prompts and is scored on the same answers here. docs/data.md has the
field tables.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnrl.data.dataset import DataError
from turnrl.data.prepare import gsm8k, math, search_r1
from turnrl.data.prepare.rows import BadRow, SkipRow
from turnrl.data.prepare.sources import HubSplit, Part

RowFn = Callable[[dict[str, Any], str, int, str], dict[str, Any]]


@dataclass(frozen=True)
class Recipe:
    to_row: RowFn  # (source row, split, index, data_source) -> verl row; raises SkipRow / BadRow
    sources: tuple[str, ...]  # data_source names it may write (--data-source picks one)
    default_source: str | None  # the upstream script's name; None: read from each file's path
    hub: tuple[HubSplit, ...]  # what --from-hub reads, as the upstream script loads it


def _train_test(repo: str, config: str | None, data_source: str) -> tuple[HubSplit, ...]:
    return tuple(HubSplit(repo, config, data_source, s, (s,)) for s in ("train", "test"))


def _search_hub() -> tuple[HubSplit, ...]:
    # Search-R1's nq_hotpotqa recipe: train on nq + hotpotqa, test on all seven (test, else dev)
    flashrag = "RUC-NLPIR/FlashRAG_datasets"
    train = tuple(HubSplit(flashrag, s, s, "train", ("train",)) for s in search_r1.TRAIN_SOURCES)
    test = tuple(HubSplit(flashrag, s, s, "test", ("test", "dev")) for s in search_r1.SOURCES)
    return train + test


RECIPES: dict[str, Recipe] = {
    "gsm8k": Recipe(
        to_row=gsm8k.to_row,
        sources=gsm8k.SOURCES,
        default_source=gsm8k.DATA_SOURCE,
        hub=_train_test("openai/gsm8k", "main", gsm8k.DATA_SOURCE),
    ),
    "math": Recipe(
        to_row=math.to_row,
        sources=math.SOURCES,
        default_source=math.SOURCES[0],
        hub=_train_test("DigitalLearningGmbH/MATH-lighteval", None, math.SOURCES[0]),
    ),
    "nq_hotpotqa": Recipe(
        to_row=search_r1.to_row, sources=search_r1.SOURCES, default_source=None, hub=_search_hub()
    ),
}


@dataclass
class Converted:
    splits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # output split -> rows
    written: Counter[tuple[str, str]] = field(default_factory=Counter)  # (split, data_source) -> rows
    skipped: list[str] = field(default_factory=list)  # "where: reason", in input order
    read: int = 0


def convert(recipe: Recipe, parts: list[Part]) -> Converted:
    """Convert every part's rows. `extra_info.index` is the row's position in its (data_source,
    split) input, skipped rows counted, so an index always points back at its source row."""
    result = Converted()
    next_index: Counter[tuple[str, str]] = Counter()
    rows: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for part in parts:
        for example in part.examples:
            key = (part.data_source, part.split)
            index = next_index[key]
            next_index[key] += 1
            result.read += 1
            try:
                row = recipe.to_row(example.fields, part.split, index, part.data_source)
            except SkipRow as why:
                result.skipped.append(f"{example.where}: {why}")
                continue
            except BadRow as err:
                raise DataError(f"{example.where}: {err}") from None
            rows[part.split].append(row)
            result.written[(part.split, part.data_source)] += 1
    result.splits = dict(rows)
    return result
