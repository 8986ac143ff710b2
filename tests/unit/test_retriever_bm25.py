"""BM25 search: the fast path (dense columns, bounded top-k) against the obvious one.

The obvious search scores a query posting by posting in float32, then fully sorts the scores
(stable, so equal scores keep document order). The fast path must give the same documents, the
same scores to the bit and the same order, ties and queries without an indexed word included.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from turnrl.servers.retriever.bm25 import BM25_DIR, BM25Searcher, build_bm25, kth_score_lower_bound, top_k

# Duplicates (0/5, 1/6) and same-length documents with the same words score equal: the ties.
CORPUS = [
    "Velmora Quist is a glassblower born in Nihou.",
    "The Raklous River flows into the Lidruk Sea.",
    "Nihou is a market town on the Raklous River.",
    "Dransk trades salt and wool along the river.",
    "Lina Foundry makes lanterns in Dransk.",
    "Velmora Quist is a glassblower born in Nihou.",
    "The Raklous River flows into the Lidruk Sea.",
    "salt river town",
    "wool river town",
    "river river river salt",
    "A poet from Nihou wrote about the salt trade.",
    "Glassblower guilds met in Dransk every spring.",
]
QUERIES = [
    "Raklous River",
    "river",  # in most documents: ties, and a dense column when allowed
    "salt town",
    "town salt",  # the same words in another order: float32 sums follow the query order
    "river river salt",  # a repeated word counts twice
    "Who was Velmora Quist?",
    "zzqxv wwkkpt",  # no indexed word: every score 0
    "the of and",  # stopwords only: no token at all
    "Nihou zzqxv",  # one known word among unknown ones
    "GLASSBLOWER, in Dransk!",
]


def obvious_search(index_dir: Path, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query: add each posting's score one at a time in float32, then a full stable sort."""
    import bm25s

    model = bm25s.BM25.load(str(index_dir / BM25_DIR))
    data, indices, indptr = (model.scores[name] for name in ("data", "indices", "indptr"))
    num_docs = int(model.scores["num_docs"])
    tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
    positions, scores = [], []
    for words in tokens:
        row = np.zeros(num_docs, dtype=np.float32)
        for word in words:
            if word in model.vocab_dict:
                term = model.vocab_dict[word]
                for j in range(indptr[term], indptr[term + 1]):
                    row[indices[j]] += data[j]  # float32 + float32, rounded to float32
        order = np.argsort(-row, kind="stable")[:k]
        positions.append(order)
        scores.append(row[order])
    return np.array(positions, dtype=np.int64), np.array(scores, dtype=np.float32)


def build(index_dir: Path, contents: list[str]) -> Path:
    index_dir.mkdir(parents=True, exist_ok=True)
    build_bm25(index_dir, contents, show_progress=False)
    return index_dir


@pytest.fixture(scope="module")
def small_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("bm25"), CORPUS)


def test_top_k_hand_worked() -> None:
    row = np.array([1.0, 3.0, 3.0, 0.0, 2.0], dtype=np.float32)
    # 3 = 3 > 2 > 1 > 0; the two 3s keep document order
    assert top_k(row, 2)[0].tolist() == [1, 2]
    assert top_k(row, 3)[0].tolist() == [1, 2, 4]
    positions, scores = top_k(row, 5)
    assert positions.tolist() == [1, 2, 4, 0, 3] and scores.tolist() == [3.0, 3.0, 2.0, 1.0, 0.0]
    # every document ties at 0 (a query with no indexed word): the first k documents
    assert top_k(np.zeros(50_000, dtype=np.float32), 3)[0].tolist() == [0, 1, 2]


def test_kth_score_lower_bound_hand_worked() -> None:
    # 4 blocks {0,4} {1,5} {2,6} {3,7}: maxima 5, 7, 0, 2; the 2nd largest maximum, 5, is at most
    # the 2nd largest score (5); the 3rd, 2, at most the 3rd (2).
    row = np.array([5, 1, 0, 0, 0, 7, 0, 2], dtype=np.float32)
    assert kth_score_lower_bound(row, 2, blocks=4) == 5
    assert kth_score_lower_bound(row, 3, blocks=4) == 2


@pytest.mark.parametrize("size", [1, 7, 1023, 1024, 1025, 5000, 70_001])
def test_top_k_matches_a_full_stable_sort(size: int) -> None:
    rng = np.random.default_rng(size)
    for levels in (2, 5, 1000):  # few distinct values: many ties, at the k-th score too
        row = rng.integers(0, levels, size).astype(np.float32)
        for k in sorted({1, min(3, size), min(10, size), size}):
            positions, scores = top_k(row, k)
            expected = np.argsort(-row, kind="stable")[:k]
            assert positions.tolist() == expected.tolist(), (levels, k)
            assert scores.tolist() == row[expected].tolist()


@pytest.mark.parametrize("dense_budget_bytes", [0, 2**20], ids=["sparse", "dense"])
def test_search_matches_obvious_search(small_index: Path, dense_budget_bytes: int) -> None:
    searcher = BM25Searcher(small_index, {"stopwords": "en"}, dense_budget_bytes=dense_budget_bytes)
    assert bool(searcher.matrix.dense) == bool(dense_budget_bytes)
    for k in (1, 3, len(CORPUS)):
        positions, scores = searcher.search(QUERIES, k)
        expected_positions, expected_scores = obvious_search(small_index, QUERIES, k)
        assert positions.tolist() == expected_positions.tolist(), k
        assert scores.tobytes() == expected_scores.tobytes(), k  # bit-identical
    positions, scores = searcher.search(["zzqxv wwkkpt", "the of and"], 3)
    assert positions.tolist() == [[0, 1, 2], [0, 1, 2]] and not scores.any()


def test_search_scores_equal_bm25s_and_untied_results_equal_its_retrieve(small_index: Path) -> None:
    import bm25s

    model = bm25s.BM25.load(str(small_index / BM25_DIR))
    searcher = BM25Searcher(small_index, {"stopwords": "en"})
    tokens = bm25s.tokenize(QUERIES, stopwords="en", return_ids=False, show_progress=False)
    old_positions, old_scores = model.retrieve(tokens, k=3, show_progress=False)
    positions, scores = searcher.search(QUERIES, 3)
    assert scores.tobytes() == np.asarray(old_scores, dtype=np.float32).tobytes()
    for i, words in enumerate(tokens):
        if words:
            full = model.get_scores(words)
            assert np.sort(full)[::-1][:3].tobytes() == scores[i].tobytes()
            if len(set(np.sort(full)[::-1][:4].tolist())) == 4:  # no tie within the top 4
                assert positions[i].tolist() == np.asarray(old_positions[i]).tolist()


def test_search_on_random_corpus_with_many_ties(tmp_path: Path) -> None:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(40)]
    weights = [1 / (i + 1) for i in range(40)]  # Zipf: the first words are in most documents
    contents = [" ".join(rng.choices(vocab, weights, k=rng.randint(3, 12))) for _ in range(300)]
    index_dir = build(tmp_path, contents)
    queries = [" ".join(rng.choices(vocab, weights, k=rng.randint(1, 5))) for _ in range(60)]
    searcher = BM25Searcher(index_dir, {"stopwords": "en"})
    assert searcher.matrix.dense  # the frequent words take the dense-column path
    for k in (1, 5, 40):
        positions, scores = searcher.search(queries, k)
        expected_positions, expected_scores = obvious_search(index_dir, queries, k)
        assert positions.tolist() == expected_positions.tolist(), k
        assert scores.tobytes() == expected_scores.tobytes(), k


def test_search_adds_nonoccurrence_scores_like_bm25s(tmp_path: Path) -> None:
    # BM25+ gives a document without a query word a constant score; turnrl builds Lucene BM25
    # (no such score), but an index built with bm25s directly may carry one.
    import bm25s

    model = bm25s.BM25(method="bm25+")
    model.index(bm25s.tokenize(CORPUS, stopwords="en", show_progress=False), show_progress=False)
    model.save(str(tmp_path / BM25_DIR))
    searcher = BM25Searcher(tmp_path, {"stopwords": "en"})
    assert searcher.matrix.nonoccurrence is not None
    tokens = bm25s.tokenize(QUERIES[:6], stopwords="en", return_ids=False, show_progress=False)
    _, scores = searcher.search(QUERIES[:6], 3)
    for i, words in enumerate(tokens):
        assert np.sort(model.get_scores(words))[::-1][:3].tobytes() == scores[i].tobytes()


def test_search_edge_cases(small_index: Path) -> None:
    searcher = BM25Searcher(small_index, {"stopwords": "en"})
    positions, scores = searcher.search([], 3)
    assert positions.shape == (0, 3) and scores.shape == (0, 3)
    with pytest.raises(ValueError, match="between 1 and the corpus size"):
        searcher.search(["river"], len(CORPUS) + 1)
