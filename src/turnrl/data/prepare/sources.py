"""Source rows from the datasets' own files (.jsonl, .json, .parquet) or from the Hugging Face hub.

Every row carries `where` (`FILE:LINE` for JSONL, `FILE row N` otherwise, N from 0) so that an
error or a skipped row names exactly the line to look at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.data.dataset import DataError

# file-name words -> the output split; verl and Search-R1 write train and test only, and Search-R1
# evaluates a set on its dev split when it has no test split (hotpotqa, 2wikimultihopqa, musique)
SPLIT_WORDS = {"train": "train", "test": "test", "dev": "test", "validation": "test", "val": "test"}
_WORD = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Example:
    where: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Part:
    """The rows of one data source and split: one input file, or one split of a hub dataset."""

    label: str  # the file or hub split, for messages
    data_source: str
    split: str  # output split: train | test
    kind: str  # the split as the source names it (train, test, dev, ...)
    examples: Iterable[Example]


@dataclass(frozen=True)
class HubSplit:
    """Where a `--from-hub` conversion reads one part: the first of `splits` the repository has."""

    repo: str
    config: str | None
    data_source: str
    split: str
    splits: tuple[str, ...]


def read_examples(path: Path) -> list[Example]:
    if path.is_dir():
        raise DataError(f"input file {path} is a directory, not a file")
    if not path.is_file():
        raise DataError(f"input file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(_jsonl(path))
    if suffix == ".json":
        return _json(path)
    if suffix == ".parquet":
        return _parquet(path)
    raise DataError(f"unsupported input file type '{suffix}' for {path}; use .jsonl, .json or .parquet")


def _jsonl(path: Path) -> Iterator[Example]:
    with path.open("rb") as fh:  # bytes: a bad byte is reported with its line number
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{lineno}: not UTF-8 text (byte at column {err.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(
                    f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})"
                ) from None
            yield Example(f"{path}:{lineno}", _object(row, f"{path}:{lineno}"))


def _json(path: Path) -> list[Example]:
    try:
        doc = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        where = f"{path}:{err.lineno}" if isinstance(err, json.JSONDecodeError) else str(path)
        raise DataError(f"{where}: not a valid JSON document ({str(err).splitlines()[0]})") from None
    # hendrycks' MATH ships one problem per .json file; the hub exports are lists
    rows = doc if isinstance(doc, list) else [doc]
    return [Example(f"{path} row {i}", _object(row, f"{path} row {i}")) for i, row in enumerate(rows)]


def _parquet(path: Path) -> list[Example]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise DataError(f"cannot read parquet file {path}: {str(err).splitlines()[0]}") from None
    return [Example(f"{path} row {i}", row) for i, row in enumerate(rows)]


def _object(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    return row


def name_words(path: Path) -> list[str]:
    """The words of the file name, then the names of its folder and the folder above, nearest first:
    FlashRAG lays files out as `nq/dev.jsonl`, hendrycks' MATH as `train/algebra/1.json`. Folder names
    count whole only, so a file under pytest's `test_x0/` or a user's `test-runs/` is not a test file."""
    words = [w for w in _WORD.split(path.stem.lower()) if w]
    return words + [p.name.lower() for p in list(path.parents)[:2]]


def split_of(path: Path, override: str | None) -> str:
    if override:
        return override
    for word in name_words(path):
        if word in SPLIT_WORDS:
            return word
    raise DataError(
        f"cannot tell the split of {path} from its name (no train/test/dev in it); pass --split train|test"
    )


def source_of(path: Path, override: str | None, sources: tuple[str, ...], default: str | None) -> str:
    chosen = override or default
    if chosen:
        return chosen
    for word in name_words(path):
        if word in sources:
            return word
    raise DataError(
        f"cannot tell which data set {path} holds from its path; keep FlashRAG's layout "
        f"(nq/train.jsonl) or pass --data-source ({', '.join(sources)})"
    )


def file_parts(
    paths: list[str],
    sources: tuple[str, ...],
    default: str | None,
    split: str | None,
    data_source: str | None,
) -> list[Part]:
    """One part per file, in the order given (a merged split keeps that order, as Search-R1's concat).
    Without `default` (nq_hotpotqa), each file's data source is read from its path."""
    parts = []
    for name in paths:
        path = Path(name)
        kind = split_of(path, split)
        source = source_of(path, data_source, sources, default)
        parts.append(Part(str(path), source, SPLIT_WORDS[kind], kind, read_examples(path)))
    _one_test_kind(parts)
    return parts


def _one_test_kind(parts: list[Part]) -> None:
    """A set's test and dev files would both land in test.parquet; Search-R1 takes one (test first)."""
    first: dict[str, Part] = {}
    for part in parts:
        if part.split != "test":
            continue
        seen = first.setdefault(part.data_source, part)
        if seen.kind != part.kind:
            raise DataError(
                f"{part.data_source}: both {seen.label} ({seen.kind}) and {part.label} ({part.kind}) "
                "would be its test split; pass one of them"
            )


def hub_parts(layout: tuple[HubSplit, ...]) -> list[Part]:
    try:
        import datasets
    except ImportError:
        raise DataError(
            "--from-hub needs the `datasets` package (pip install datasets) and network access; "
            "or download the files and pass them with --input"
        ) from None
    parts = []
    for hub in layout:
        loaded = _load(datasets, hub)
        kind = next((s for s in hub.splits if s in loaded), None)
        if kind is None:
            raise DataError(f"--from-hub: {hub.repo} {hub.config or ''} has none of the splits {hub.splits}")
        label = f"{hub.repo}:{hub.config or 'default'}/{kind}"
        rows = (Example(f"{label} row {i}", dict(r)) for i, r in enumerate(loaded[kind]))
        parts.append(Part(label, hub.data_source, hub.split, kind, rows))
    return parts


def _load(datasets: Any, hub: HubSplit) -> Any:
    try:
        return datasets.load_dataset(hub.repo, hub.config)
    except Exception as err:  # offline, a renamed repository, a gated one: all end the same way
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(
            f"--from-hub: cannot load {hub.repo} ({reason}); or download the files and pass them with --input"
        ) from None
