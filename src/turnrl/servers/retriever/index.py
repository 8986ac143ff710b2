"""Index directories: build one from a corpus file, load one for serving.

Layout of an index directory (everything `serve` needs, nothing else):

    meta.json       {"format", "version", "method", "num_docs", ...}; written last, so a
                    build that died half-way is recognised as incomplete
    corpus.arrow    the documents, {id, contents}, in index order
    bm25/           bm25s score matrix and vocabulary       (method "bm25")
    dense.faiss     flat inner-product index of embeddings  (method "dense")
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from turnrl.servers.retriever.corpus import CorpusStore, read_corpus, write_corpus_store
from turnrl.servers.retriever.errors import CorpusError, IndexLoadError, RetrieverError

META_FILE = "meta.json"
FORMAT = "turnrl-retriever-index"
FORMAT_VERSION = 1
METHODS = ("bm25", "dense")


class Searcher(Protocol):
    method: str
    num_docs: int

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` (positions, scores), each [len(queries), k], best first."""
        ...


@dataclass
class BuildReport:
    index_dir: Path
    meta: dict[str, Any]
    seconds: float
    size_bytes: int


@dataclass
class LoadedIndex:
    index_dir: Path
    meta: dict[str, Any]
    corpus: CorpusStore
    searcher: Searcher

    @property
    def num_docs(self) -> int:
        return len(self.corpus)

    @property
    def method(self) -> str:
        return str(self.meta["method"])


def turnrl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("turnrl")
    except PackageNotFoundError:
        return "unknown"


def directory_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _is_turnrl_index(path: Path) -> bool:
    try:
        return json.loads((path / META_FILE).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _check_out_dir(out_dir: Path) -> bool:
    """Whether `out_dir` holds an index to replace; raises if it holds anything else."""
    if out_dir.exists() and not out_dir.is_dir():
        raise RetrieverError(f"{out_dir}: output path exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not _is_turnrl_index(out_dir):
            raise RetrieverError(
                f"{out_dir}: output directory is not empty and is not a turnrl index; refusing to overwrite"
            )
        return True
    return False


def build_index(
    corpus_path: str | Path,
    out_dir: str | Path,
    method: str = "bm25",
    show_progress: bool = True,
    model: str | None = None,
    device: str | None = None,
) -> BuildReport:
    """Read a corpus, build a `method` index into `out_dir` and write its metadata."""
    if method not in METHODS:
        raise RetrieverError(f"unknown retrieval method '{method}' (choose from {', '.join(METHODS)})")
    corpus_path, out_dir = Path(corpus_path), Path(out_dir)
    start = time.perf_counter()
    if method == "dense":
        _require_dense_extras()
    replace = _check_out_dir(out_dir)  # before reading: a bad --out fails in a second, not after the read
    ids, contents = read_corpus(corpus_path, show_progress=show_progress)
    # built beside `out_dir` and moved into place whole: a build that fails (a corpus with no
    # indexable word, an interrupted run) leaves neither a half-written index nor a lost old one
    building = _fresh_building_dir(out_dir)
    try:
        write_corpus_store(building, ids, contents)
        settings = _build_method(building, contents, method, model, device, show_progress)
    except CorpusError as err:
        shutil.rmtree(building, ignore_errors=True)
        raise CorpusError(f"{corpus_path}: {err}") from None
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    seconds = time.perf_counter() - start
    meta = _build_meta(method, len(ids), corpus_path, seconds, settings)
    _move_into_place(building, out_dir, meta, replace)
    return BuildReport(out_dir, meta, seconds, directory_size(out_dir))


def _require_dense_extras() -> None:
    """Raise if faiss or sentence-transformers is missing."""
    # Fail on a missing extra before spending minutes reading the corpus.
    from turnrl.servers.retriever.dense import require_module

    for module in ("faiss", "sentence_transformers"):
        require_module(module)


def _fresh_building_dir(out_dir: Path) -> Path:
    """An empty `.NAME.building-PID` beside `out_dir` (a leftover of an earlier run removed)."""
    building = out_dir.with_name(f".{out_dir.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    return building


def _build_method(
    building: Path,
    contents: list[str],
    method: str,
    model: str | None,
    device: str | None,
    show_progress: bool,
) -> dict[str, Any]:
    """Write the `method` index of `contents` into `building`; returns its settings for the metadata."""
    if method == "bm25":
        from turnrl.servers.retriever.bm25 import build_bm25

        return build_bm25(building, contents, show_progress=show_progress)
    from turnrl.servers.retriever.dense import build_dense

    return build_dense(building, contents, model=model, device=device, show_progress=show_progress)


def _build_meta(
    method: str, num_docs: int, corpus_path: Path, seconds: float, settings: dict[str, Any]
) -> dict[str, Any]:
    """The contents of meta.json for a finished build."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "method": method,
        "num_docs": num_docs,
        "source": str(corpus_path.resolve()),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(seconds, 3),
        "turnrl_version": turnrl_version(),
        method: settings,
    }


def _move_into_place(building: Path, out_dir: Path, meta: dict[str, Any], replace: bool) -> None:
    """Write meta.json last (it marks the build complete), then swap `building` in as `out_dir`."""
    (building / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if replace:  # cleared whole, so no stale file of another method lingers
        shutil.rmtree(out_dir)
    os.replace(building, out_dir)


def read_meta(index_dir: Path) -> dict[str, Any]:
    if not index_dir.exists():
        raise IndexLoadError(
            f"{index_dir}: index directory not found (build one with `turnrl retriever index --corpus FILE --out {index_dir}`)"
        )
    if not index_dir.is_dir():
        raise IndexLoadError(f"{index_dir}: not a directory")
    path = index_dir / META_FILE
    if not path.is_file():
        raise IndexLoadError(f"{path}: missing; not a turnrl index directory, or its build did not finish")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise IndexLoadError(f"{path}: corrupt metadata ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise IndexLoadError(f'{path}: not turnrl retriever metadata (no "format": "{FORMAT}")')
    if meta.get("version") != FORMAT_VERSION:
        raise IndexLoadError(
            f"{path}: index format version {meta.get('version')}, this turnrl reads {FORMAT_VERSION}"
        )
    if meta.get("method") not in METHODS:
        raise IndexLoadError(
            f"{path}: unknown method {meta.get('method')!r} (expected one of {', '.join(METHODS)})"
        )
    return meta


def load_index(index_dir: str | Path, device: str | None = None) -> LoadedIndex:
    """Open an index directory for serving; every defect raises IndexLoadError naming the file."""
    index_dir = Path(index_dir)
    meta = read_meta(index_dir)
    corpus = CorpusStore(index_dir)
    searcher: Searcher
    if meta["method"] == "bm25":
        from turnrl.servers.retriever.bm25 import BM25Searcher

        searcher = BM25Searcher(index_dir, meta.get("bm25", {}))
    else:
        from turnrl.servers.retriever.dense import DenseSearcher

        searcher = DenseSearcher(index_dir, meta.get("dense", {}), device=device)
    counts = {"meta.json": meta.get("num_docs"), "corpus": len(corpus), meta["method"]: searcher.num_docs}
    if len(set(counts.values())) != 1:
        raise IndexLoadError(f"{index_dir}: document counts disagree {counts}; rebuild the index")
    return LoadedIndex(index_dir, meta, corpus, searcher)
