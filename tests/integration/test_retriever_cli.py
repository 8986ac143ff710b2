"""`turnrl retriever index|serve` as a user runs them: exit codes and one-line errors.

Most cases run in-process through `turnrl.cli.main` (the `cli` fixture); the index the module
shares, and the run without the dense extra (a shadowed import), run the command as a process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from turnrl.runtime import free_port
from turnrl.servers.retriever.launcher import LocalRetriever
from turnrl.tasks.search.corpus import write_builtin_corpus


def turnrl(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnrl.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def error_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    return lines[0]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    paths = write_builtin_corpus(root / "bc", n_entities=30, seed=5)
    proc = turnrl("retriever", "index", "--corpus", str(paths.corpus), "--out", str(root / "index"))
    assert proc.returncode == 0, proc.stderr
    # The summary line reports count, method, build time and on-disk size.
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("indexed 30 documents (bm25) in ") and "index size" in summary
    assert "read corpus" in proc.stderr  # the progress bar
    return root / "index"


def test_index_writes_corpus_and_metadata(index_dir: Path) -> None:
    meta = json.loads((index_dir / "meta.json").read_text())
    assert meta["method"] == "bm25" and meta["num_docs"] == 30 and meta["version"] == 1
    assert meta["format"] == "turnrl-retriever-index" and meta["bm25"]["k1"] == 0.9
    assert (index_dir / "corpus.arrow").is_file() and (index_dir / "bm25").is_dir()


def test_index_from_parquet_and_rebuild_in_place(tmp_path: Path, cli) -> None:
    pq.write_table(
        pa.table({"id": ["a", "b"], "contents": ['"Alpha"\nfirst', "Beta\nsecond"]}), tmp_path / "c.parquet"
    )
    for _ in range(2):  # the second run replaces the first index
        proc = cli(
            "retriever", "index", "--corpus", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "ix")
        )
        assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "ix" / "meta.json").read_text())["num_docs"] == 2


def test_index_refuses_a_foreign_non_empty_directory(tmp_path: Path, cli) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"id": "0", "contents": "A\\nb"}\n')
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    proc = cli(
        "retriever", "index", "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "mine")
    )
    assert proc.returncode == 1 and "is not a turnrl index; refusing to overwrite" in error_line(proc)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_index_row_without_contents_names_file_and_line(tmp_path: Path, cli) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "0", "contents": "A\\nfine"}\n{"id": "1", "text": "oops"}\n')
    proc = cli("retriever", "index", "--corpus", str(corpus), "--out", str(tmp_path / "ix"), "--no-progress")
    assert proc.returncode == 1
    assert (
        error_line(proc)
        == f"turnrl retriever index: error: {corpus}:2: row has no 'contents' field (keys: ['id', 'text'])"
    )
    assert not (tmp_path / "ix" / "meta.json").exists()


def test_dense_without_extra_names_the_extra(tmp_path: Path) -> None:
    # Shadow faiss with a module that fails to import, as on a machine without the extra.
    shadow = tmp_path / "shadow"
    (shadow / "faiss").mkdir(parents=True)
    (shadow / "faiss" / "__init__.py").write_text("raise ImportError(\"No module named 'faiss'\")\n")
    (tmp_path / "corpus.jsonl").write_text('{"id": "0", "contents": "A\\nb"}\n')
    env = {"PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])}
    args = ["retriever", "index", "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "ix")]
    proc = turnrl(*args, "--method", "dense", env=env)
    assert proc.returncode == 1
    line = error_line(proc)
    assert "needs the 'dense' extra" in line and "module 'faiss' is missing" in line
    assert "pip install 'turnrl[dense]'" in line


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        ("missing-dir", "index directory not found (build one with `turnrl retriever index"),
        ("no-meta", "meta.json: missing; not a turnrl index directory"),
        ("bad-meta", "meta.json: corrupt metadata"),
        ("truncated-corpus", "corpus.arrow: corpus file is corrupt"),
        ("no-bm25", "bm25: BM25 index folder missing"),
        ("bad-bm25", "bm25: BM25 index is corrupt"),
        ("count-mismatch", "document counts disagree"),
    ],
)
def test_serve_rejects_broken_index(index_dir: Path, tmp_path: Path, cli, damage: str, needle: str) -> None:
    broken = tmp_path / "broken"
    if damage != "missing-dir":
        subprocess.run(["cp", "-r", str(index_dir), str(broken)], check=True)
    if damage == "no-meta":
        (broken / "meta.json").unlink()
    elif damage == "bad-meta":
        (broken / "meta.json").write_text('{"format": "turnrl-retriever-index", ')
    elif damage == "truncated-corpus":
        data = (broken / "corpus.arrow").read_bytes()
        (broken / "corpus.arrow").write_bytes(data[: len(data) // 2])
    elif damage == "no-bm25":
        subprocess.run(["rm", "-r", str(broken / "bm25")], check=True)
    elif damage == "bad-bm25":
        (broken / "bm25" / "params.index.json").write_text("{not json")
    elif damage == "count-mismatch":
        meta = json.loads((broken / "meta.json").read_text())
        (broken / "meta.json").write_text(json.dumps({**meta, "num_docs": 31}))
    proc = cli("retriever", "serve", "--index", str(broken), "--port", str(free_port()))
    assert proc.returncode == 1
    line = error_line(proc)
    assert line.startswith("turnrl retriever serve: error: ") and needle in line and str(broken) in line


def test_serve_rejects_topk_beyond_corpus(index_dir: Path, cli) -> None:
    proc = cli("retriever", "serve", "--index", str(index_dir), "--topk", "31", "--port", str(free_port()))
    assert proc.returncode == 1 and "--topk 31: must be between 1 and the corpus size (30)" in error_line(
        proc
    )


def test_launcher_reports_child_start_up_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"exited at start-up: .*index directory not found"):
        LocalRetriever(tmp_path / "nothing-here", startup_timeout=60).start()


def test_bare_retriever_command_prints_help(cli) -> None:
    proc = cli("retriever")
    assert proc.returncode == 2 and "index" in proc.stdout and "serve" in proc.stdout
