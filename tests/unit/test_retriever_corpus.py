"""Corpus files, title splitting, Search-R1 passage formatting and the built-in corpus."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from turnrl.servers.retriever.client import Passage, endpoints, format_passages
from turnrl.servers.retriever.corpus import CorpusStore, read_corpus, split_title, write_corpus_store
from turnrl.servers.retriever.errors import CorpusError
from turnrl.tasks.search.corpus import builtin_documents, builtin_qa, write_builtin_corpus


@pytest.mark.parametrize(
    ("contents", "title", "text"),
    [
        ("Paris\nParis is the capital of France.", "Paris", "Paris is the capital of France."),
        ('"Paris"\nParis is the capital.', "Paris", "Paris is the capital."),  # wiki-18 quotes titles
        ('"Say "hi""\nA song.', 'Say "hi"', "A song."),  # only the outer pair is stripped
        ("Title only", "Title only", ""),
        ("T\nline one\nline two", "T", "line one\nline two"),
        ('"\nx', '"', "x"),  # a lone quote is a title, not a quoted empty one
    ],
)
def test_split_title(contents: str, title: str, text: str) -> None:
    assert split_title(contents) == (title, text)


def test_format_passages_matches_search_r1_exactly() -> None:
    passages = [
        Passage("12", '"Velmora Quist"\nVelmora Quist was born in 1847.', 9.5),
        Passage("7", "Dransk\nDransk lies on the Quell River.\nIt trades salt.", 4.0),
    ]
    expected = (
        "Doc 1(Title: Velmora Quist) Velmora Quist was born in 1847.\n"
        "Doc 2(Title: Dransk) Dransk lies on the Quell River.\nIt trades salt.\n"
    )
    assert format_passages(passages) == expected
    # The same items as Search-R1's server sends them, with and without scores.
    with_scores = [{"document": {"id": p.id, "contents": p.contents}, "score": p.score} for p in passages]
    bare = [{"id": p.id, "contents": p.contents} for p in passages]
    assert format_passages(with_scores) == expected
    assert format_passages(bare) == expected
    assert format_passages([]) == ""


def test_endpoints_accept_base_or_retrieve_url() -> None:
    assert endpoints("http://127.0.0.1:8000/retrieve") == (
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/retrieve",
    )
    assert endpoints("http://127.0.0.1:8000/") == ("http://127.0.0.1:8000", "http://127.0.0.1:8000/retrieve")


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_read_jsonl_and_parquet(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "contents": "A\ntext a"},
        {"id": 5, "contents": "B\ntext b"},
        {"contents": "C\nno id"},
    ]
    ids, contents = read_corpus(_write_jsonl(tmp_path / "c.jsonl", rows), show_progress=False)
    assert ids == ["a", "5", "2"]  # ids become strings; a missing id falls back to the row position
    assert contents == ["A\ntext a", "B\ntext b", "C\nno id"]
    pq.write_table(pa.table({"id": ["x", "y"], "contents": ["X\n1", "Y\n2"]}), tmp_path / "c.parquet")
    assert read_corpus(tmp_path / "c.parquet", show_progress=False) == (["x", "y"], ["X\n1", "Y\n2"])
    # wiki-18 is distributed gzipped.
    with gzip.open(tmp_path / "wiki.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "0", "contents": '"Aaron"\nAaron is a prophet.'}) + "\n")
    assert read_corpus(tmp_path / "wiki.jsonl.gz", show_progress=False) == (
        ["0"],
        ['"Aaron"\nAaron is a prophet.'],
    )


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        (
            ['{"id": "0", "contents": "A\\nx"}', "", '{"id": "1", "text": "no contents"}'],
            "c.jsonl:3: row has no 'contents'",
        ),
        (['{"id": "0", "contents": 17}'], "c.jsonl:1: 'contents' must be a string"),
        (['{"id": "0", "contents": "A"}', '{"id": "1", "contents": '], "c.jsonl:2: invalid JSON"),
        (['["not", "an", "object"]'], "c.jsonl:1: expected a JSON object"),
        (["", "  "], "corpus has no documents"),
    ],
)
def test_bad_jsonl_rows_name_file_and_line(tmp_path: Path, lines: list[str], needle: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=None) as info:
        read_corpus(path, show_progress=False)
    message = str(info.value)
    assert needle in message and "\n" not in message


def test_bad_parquet_and_missing_file(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": ["x"], "text": ["no contents column"]}), tmp_path / "a.parquet")
    with pytest.raises(CorpusError, match="no 'contents' column"):
        read_corpus(tmp_path / "a.parquet", show_progress=False)
    pq.write_table(pa.table({"id": ["x", "y"], "contents": ["X", None]}), tmp_path / "b.parquet")
    with pytest.raises(CorpusError, match=r"b\.parquet: row 1: row has no 'contents'"):
        read_corpus(tmp_path / "b.parquet", show_progress=False)
    with pytest.raises(CorpusError, match="corpus file not found"):
        read_corpus(tmp_path / "missing.jsonl", show_progress=False)
    (tmp_path / "dir.jsonl").mkdir()  # once "not found" too
    with pytest.raises(CorpusError, match=r"dir\.jsonl: the corpus is a directory, not a file$"):
        read_corpus(tmp_path / "dir.jsonl", show_progress=False)


def test_builtin_corpus_is_deterministic_and_self_consistent() -> None:
    docs, qa = builtin_documents(120, seed=3), builtin_qa(120, seed=3)
    assert builtin_documents(120, seed=3) == docs and builtin_qa(120, seed=3) == qa
    assert builtin_documents(120, seed=4) != docs
    assert len(docs) == 120
    titles = [split_title(d["contents"])[0] for d in docs]
    assert len(set(titles)) == len(titles)  # one document per entity
    by_id = {d["id"]: d for d in docs}
    relations = {pair.relation for pair in qa}
    assert {"birth_year", "birthplace", "founder", "length_km", "river", "product"} <= relations
    for pair in qa:
        title, text = split_title(by_id[pair.doc_id]["contents"])
        assert title == pair.title and pair.answers[0] in text
        assert pair.title in pair.question or pair.title.removesuffix(" River") in pair.question
    # A fact is stated once: no two questions share (entity, relation).
    assert len({(p.title, p.relation) for p in qa}) == len(qa)


def test_write_builtin_corpus_round_trips(tmp_path: Path) -> None:
    paths = write_builtin_corpus(tmp_path / "bc", n_entities=20, seed=0)
    ids, contents = read_corpus(paths.corpus, show_progress=False)
    assert [{"id": i, "contents": c} for i, c in zip(ids, contents, strict=True)] == builtin_documents(20, 0)
    rows = [json.loads(line) for line in paths.qa.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == paths.num_questions == len(builtin_qa(20, 0))
    assert rows[0]["question"] == builtin_qa(20, 0)[0].question and isinstance(rows[0]["answers"], list)
    with pytest.raises(ValueError, match="n_entities"):
        builtin_documents(3)


def test_cli_parser_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from turnrl.cli import build_parser; "
        "a = build_parser(['retriever']).parse_args(['retriever', 'serve', '--index', 'x']); "
        "assert callable(a.func) and a.port == 8000 and a.topk == 3 and a.host == '127.0.0.1'; "
        "heavy = [m for m in ('torch', 'fastapi', 'bm25s', 'sentence_transformers') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_corpus_store_fetches_across_chunks(tmp_path: Path) -> None:
    ids = [f"d{i}" for i in range(10)]
    contents = [f"T{i}\ntext {i}" for i in range(10)]
    write_corpus_store(tmp_path, ids, contents, chunk_rows=3)  # chunks [0-2] [3-5] [6-8] [9]
    store = CorpusStore(tmp_path)
    assert len(store) == 10
    order = [9, 0, 3, 2, 6, 5, 8, 9]
    assert store.documents(order) == [{"id": ids[i], "contents": contents[i]} for i in order]
    assert store.documents([]) == []
    with pytest.raises(IndexError, match="out of range"):
        store.documents([10])


def test_a_gz_that_is_not_gzip_or_text_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    bad_gz = tmp_path / "corpus.jsonl.gz"
    bad_gz.write_text("not gzip at all\n")
    with pytest.raises(CorpusError, match=r"corpus\.jsonl\.gz: not a readable gzip file"):
        read_corpus(bad_gz, show_progress=False)
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(b'{"id": "1", "contents": "a b c"}\n' * 100)[:40])
    with pytest.raises(CorpusError, match=r"cut\.jsonl\.gz: not a readable gzip file"):
        read_corpus(truncated, show_progress=False)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "1", "contents": "ok"}\n{"id": "2", "contents": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match=r"latin\.jsonl: not UTF-8 text \(byte 0xe9\)"):
        read_corpus(latin, show_progress=False)


def test_a_corpus_with_no_indexable_word_is_one_line_and_the_old_index_stays(tmp_path: Path) -> None:
    from turnrl.servers.retriever.index import META_FILE, build_index

    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": "1", "contents": "Drelith\nDrelith lies on the Toubres River."}) + "\n")
    out = tmp_path / "index"
    build_index(good, out, show_progress=False)
    before = sorted(p.name for p in out.iterdir())
    meta = (out / META_FILE).read_text()
    words = tmp_path / "none.jsonl"
    words.write_text(json.dumps({"id": "1", "contents": "!!! ??? ..."}) + "\n")
    with pytest.raises(CorpusError) as err:
        build_index(words, out, show_progress=False)
    assert str(err.value).startswith(f"{words}: the corpus has no indexable word") and "\n" not in str(
        err.value
    )
    assert sorted(p.name for p in out.iterdir()) == before and (out / META_FILE).read_text() == meta
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no build directory left
