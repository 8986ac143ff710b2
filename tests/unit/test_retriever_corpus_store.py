"""CorpusStore decodes rows straight from the Arrow buffers: it must agree with pyarrow's own reading."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from turnrl.servers.retriever.corpus import CORPUS_FILE, CorpusStore, write_corpus_store
from turnrl.servers.retriever.errors import IndexLoadError


def test_documents_match_pyarrow_for_multibyte_text_across_chunks(tmp_path: Path) -> None:
    # 1-, 2-, 3- and 4-byte UTF-8 characters, an empty text and an empty id, over uneven chunks
    ids = ["a", "", "Zürich", "東京", "7", "x" * 300, "🙂", "last"]
    contents = [
        "plain",
        "",
        "Zürich\nliegt an der Limmat.",
        "東京\n日本の首都",
        "t\n",
        "y" * 5000,
        "🙂\n🙃",
        "end",
    ]
    write_corpus_store(tmp_path, ids, contents, chunk_rows=3)  # chunks [0-2] [3-5] [6-7]
    store = CorpusStore(tmp_path)
    table = pa.ipc.open_file(pa.memory_map(str(tmp_path / CORPUS_FILE))).read_all()
    order = [7, 0, 3, 3, 6, 1, 5, 2, 4]
    expected = [
        {"id": table.column("id")[i].as_py(), "contents": table.column("contents")[i].as_py()} for i in order
    ]
    assert store.documents(order) == expected
    assert expected[0] == {"id": "last", "contents": "end"}


def test_a_corpus_column_of_another_type_is_refused(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(["0"], pa.string()), "contents": pa.array(["x"], pa.large_string())})
    with pa.OSFile(str(tmp_path / CORPUS_FILE), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(IndexLoadError, match="column 'id' must be large_string without nulls"):
        CorpusStore(tmp_path)
