"""Sparse retrieval with BM25 (Robertson et al.), indexed by the `bm25s` library.

bm25s precomputes every (term, document) score into a sparse matrix at index time, so a
query costs a few array additions and one top-k selection: no scipy, no JVM (unlike the
pyserini index Search-R1 uses), and the index loads in well under a second.

Queries are scored here rather than by `bm25s.BM25.retrieve`, whose cost at 100k documents
was 1.8 ms per query: 1.2 ms in a full `argpartition` of every score row, 0.6 ms in
`np.add.at` over the posting lists of common words, which cover most of the corpus. This
module adds the longest posting lists as dense columns (one vectorised add each), and finds
the top k among the few documents at or above a cheap lower bound of the k-th score: about
0.15 ms. Scores are bit-identical to bm25s's (the same float32 additions, in the same order);
equal scores go to the lower document position, where bm25s left them in whatever order its
partition produced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.servers.retriever.errors import CorpusError, IndexLoadError

BM25_DIR = "bm25"
# Lucene's defaults, the same parameters pyserini's wiki-18 index was searched with.
DEFAULT_PARAMS: dict[str, Any] = {"k1": 0.9, "b": 0.4, "method": "lucene", "stopwords": "en"}
# A dense add streams num_docs floats (~0.15 ns each); a scatter-add costs ~3-5 ns per posting,
# so expanding a column pays off from about num_docs / 30 postings. 1/16 keeps a margin.
DENSE_MIN_FRACTION = 1 / 16
# Dense columns are private to each server process (the sparse matrix is a shared mmap):
# 94 columns (38 MB) at 100k documents; at wiki-18's 21M documents the budget keeps only the 3
# most frequent words.
DENSE_BUDGET_BYTES = 256 * 2**20
# Blocks whose maxima bound the k-th score from below: enough that few documents reach the
# bound, few enough that selecting among the maxima costs nothing.
BOUND_BLOCKS = 1024


def build_bm25(index_dir: Path, contents: list[str], show_progress: bool = True) -> dict[str, Any]:
    """Tokenise and index `contents`; returns the settings to record in the index metadata."""
    import bm25s

    params = dict(DEFAULT_PARAMS)
    tokens = bm25s.tokenize(contents, stopwords=params["stopwords"], show_progress=show_progress)
    if not any(tokens.vocab):
        raise CorpusError(
            "the corpus has no indexable word: every document is empty once tokenised and English "
            "stopwords are dropped"
        )
    model = bm25s.BM25(k1=params["k1"], b=params["b"], method=params["method"])
    model.index(tokens, show_progress=show_progress)
    model.save(str(index_dir / BM25_DIR), show_progress=False)
    params["vocab_size"] = len(tokens.vocab)
    return params


@dataclass(frozen=True)
class ScoreMatrix:
    """bm25s's precomputed scores in CSC form: column `t` holds the documents containing term `t`."""

    data: np.ndarray  # float32 BM25 score of each (term, document) posting
    indices: np.ndarray  # document position of each posting
    indptr: np.ndarray  # term t's postings are [indptr[t], indptr[t + 1])
    num_docs: int
    dense: Mapping[int, np.ndarray]  # frequent terms' columns, expanded to num_docs floats
    nonoccurrence: np.ndarray | None  # per-term score of a document without the term (BM25L/BM25+)


def expand_frequent_terms(
    data: np.ndarray,
    indices: np.ndarray,
    indptr: np.ndarray,
    num_docs: int,
    min_fraction: float = DENSE_MIN_FRACTION,
    budget_bytes: int = DENSE_BUDGET_BYTES,
) -> dict[int, np.ndarray]:
    """Dense score columns of the terms found in >= `min_fraction` of documents, most frequent first.

    A dense column is 0 where the term is absent; adding 0.0 leaves a float32 sum unchanged,
    so a dense add gives exactly the scatter-add's result.
    """
    lengths = np.diff(indptr)
    frequent = np.flatnonzero(lengths >= max(1, min_fraction * num_docs))
    frequent = frequent[np.argsort(-lengths[frequent], kind="stable")]
    keep = frequent[: budget_bytes // (4 * num_docs)]
    columns = {}
    for term in keep.tolist():
        column = np.zeros(num_docs, dtype=np.float32)
        start, end = indptr[term], indptr[term + 1]
        column[indices[start:end]] = data[start:end]
        columns[term] = column
    return columns


def token_ids(tokens: Sequence[Sequence[str]], vocab: Mapping[str, int]) -> list[list[int]]:
    """Each query's known terms as ids, in query order, repeats kept (a repeated word counts twice).

    String tokens are looked up rather than ids asked of the tokenizer: terms unseen at index
    time are dropped, instead of growing a query-time vocabulary.
    """
    return [[vocab[token] for token in query if token in vocab] for query in tokens]


def score_query(row: np.ndarray, terms: Sequence[int], matrix: ScoreMatrix) -> None:
    """Add the query's term scores into `row` (zeroed by the caller), term by term in query order.

    The order matters: float32 addition is not associative, and bm25s adds term by term too.
    Python runs once per term; the work per term is one array operation over its column.
    """
    for term in terms:
        column = matrix.dense.get(term)
        if column is not None:
            row += column
        else:
            start, end = matrix.indptr[term], matrix.indptr[term + 1]
            # np.add.at takes the int32 indices as they are (fancy `row[idx] +=` would copy
            # them to int64 first) and has a fast path for this 1-D case since numpy 1.25.
            np.add.at(row, matrix.indices[start:end], matrix.data[start:end])
    if matrix.nonoccurrence is not None and len(terms):
        row += matrix.nonoccurrence[np.asarray(terms, dtype=np.int64)].sum()


def kth_score_lower_bound(row: np.ndarray, k: int, blocks: int = BOUND_BLOCKS) -> np.generic:
    """A value at most the k-th largest of `row`: the k-th largest of `blocks` block maxima.

    The blocks are disjoint (documents j, j + blocks, j + 2 * blocks, ...; a reshape, no copy),
    so k block maxima >= v are k distinct documents scoring >= v.
    """
    blocks = min(len(row), max(blocks, k))
    per_block = len(row) // blocks
    maxima = row[: blocks * per_block].reshape(per_block, blocks).max(axis=0)
    return np.partition(maxima, blocks - k)[blocks - k]


def top_k(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `k` best (positions, scores) of `row`, best first; equal scores go to the lower position.

    Only documents scoring >= a lower bound of the k-th score can be in the top k; they are a
    handful, so sorting them costs nothing, unlike a partition of the whole row.
    """
    bound = kth_score_lower_bound(row, k)
    candidates = np.flatnonzero(row >= bound)
    scores = row[candidates]
    above = candidates[scores > bound]
    if len(above) < k:
        # The top k reach down to `bound` itself. Many documents may tie there (every one, for
        # a query with no indexed word): keep only the lowest positions that can be chosen.
        tied = candidates[scores == bound][: k - len(above)]
        candidates = np.concatenate([above, tied])
    else:
        candidates = above
    scores = row[candidates]
    order = np.lexsort((candidates, -scores))[:k]
    return candidates[order], scores[order]


class BM25Searcher:
    """Scores a batch of queries against a saved bm25s index."""

    method = "bm25"

    def __init__(
        self, index_dir: Path, settings: dict[str, Any], dense_budget_bytes: int = DENSE_BUDGET_BYTES
    ) -> None:
        import bm25s

        path = index_dir / BM25_DIR
        if not path.is_dir():
            raise IndexLoadError(f"{path}: BM25 index folder missing from the index directory")
        try:
            # mmap: the score matrix stays in the page cache, shared by every server process.
            model = bm25s.BM25.load(str(path), mmap=True, show_progress=False)
        except Exception as err:  # numpy/json raise various types for a damaged file
            raise IndexLoadError(f"{path}: BM25 index is corrupt ({type(err).__name__}: {err})") from None
        self._stopwords = settings.get("stopwords", DEFAULT_PARAMS["stopwords"])
        self._vocab: dict[str, int] = model.vocab_dict
        self.num_docs = int(model.scores["num_docs"])
        # Plain ndarray views of the memory maps: np.memmap slices carry per-call subclass overhead.
        data, indices, indptr = (np.asarray(model.scores[name]) for name in ("data", "indices", "indptr"))
        self.matrix = ScoreMatrix(
            data=data,
            indices=indices,
            indptr=indptr,
            num_docs=self.num_docs,
            dense=expand_frequent_terms(
                data, indices, indptr, self.num_docs, budget_bytes=dense_budget_bytes
            ),
            nonoccurrence=model.nonoccurrence_array,
        )

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` (positions, scores), each of shape [len(queries), k], best first.

        Equal scores are ordered by document position, lower first.
        """
        import bm25s

        if not 0 < k <= self.num_docs:
            raise ValueError(f"k: must be between 1 and the corpus size ({self.num_docs}), got {k}")
        positions = np.zeros((len(queries), k), dtype=np.int64)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        if not queries:
            return positions, scores
        tokens = bm25s.tokenize(queries, stopwords=self._stopwords, return_ids=False, show_progress=False)
        # One score row, reused: a fresh 0.4 MB array per query would be a fresh mmap, page faults included.
        row = np.empty(self.num_docs, dtype=np.float32)
        for i, terms in enumerate(token_ids(tokens, self._vocab)):
            row.fill(0)
            score_query(row, terms, self.matrix)
            positions[i], scores[i] = top_k(row, k)
        return positions, scores
