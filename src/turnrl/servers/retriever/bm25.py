"""Sparse retrieval with BM25 (Robertson et al.), through the `bm25s` library.

bm25s precomputes every (term, document) score into a sparse matrix at index time, so a
query costs a few array gathers and one top-k selection: no scipy, no JVM (unlike the
pyserini index Search-R1 uses), and the index loads in well under a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from turnrl.servers.retriever.errors import IndexLoadError

BM25_DIR = "bm25"
# Lucene's defaults, the same parameters pyserini's wiki-18 index was searched with.
DEFAULT_PARAMS: dict[str, Any] = {"k1": 0.9, "b": 0.4, "method": "lucene", "stopwords": "en"}


def build_bm25(index_dir: Path, contents: list[str], show_progress: bool = True) -> dict[str, Any]:
    """Tokenise and index `contents`; returns the settings to record in the index metadata."""
    import bm25s

    params = dict(DEFAULT_PARAMS)
    tokens = bm25s.tokenize(contents, stopwords=params["stopwords"], show_progress=show_progress)
    model = bm25s.BM25(k1=params["k1"], b=params["b"], method=params["method"])
    model.index(tokens, show_progress=show_progress)
    model.save(str(index_dir / BM25_DIR), show_progress=False)
    params["vocab_size"] = len(tokens.vocab)
    return params


class BM25Searcher:
    """Scores a batch of queries against a saved bm25s index."""

    method = "bm25"

    def __init__(self, index_dir: Path, settings: dict[str, Any]) -> None:
        import bm25s

        path = index_dir / BM25_DIR
        if not path.is_dir():
            raise IndexLoadError(f"{path}: BM25 index folder missing from the index directory")
        try:
            # mmap: the score matrix stays in the page cache, shared by every server process.
            self._model = bm25s.BM25.load(str(path), mmap=True, show_progress=False)
        except Exception as err:  # numpy/json raise various types for a damaged file
            raise IndexLoadError(f"{path}: BM25 index is corrupt ({type(err).__name__}: {err})") from None
        self._stopwords = settings.get("stopwords", DEFAULT_PARAMS["stopwords"])
        self.num_docs = int(self._model.scores["num_docs"])

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` (positions, scores), each of shape [len(queries), k], best first."""
        import bm25s

        if not queries:
            return np.zeros((0, k), dtype=np.int64), np.zeros((0, k), dtype=np.float32)
        # String tokens (not ids): terms unseen at index time are dropped by the lookup,
        # instead of growing a query-time vocabulary.
        tokens = bm25s.tokenize(queries, stopwords=self._stopwords, return_ids=False, show_progress=False)
        positions, scores = self._model.retrieve(tokens, k=k, show_progress=False)
        return np.asarray(positions, dtype=np.int64), np.asarray(scores, dtype=np.float32)
