"""Corpus files: `{id, contents}` rows with the title on the first line of `contents`.

This is the format of Search-R1's wiki-18 corpus (JSONL, optionally gzipped) and of
FlashRAG's corpora; parquet files with the same two columns are read too. Inside an index
directory the corpus is kept as an Arrow IPC file, memory-mapped at serve time, so a
server's resident memory does not grow with the corpus and rows are fetched by position.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from turnrl.servers.retriever.errors import CorpusError, IndexLoadError


def split_title(contents: str) -> tuple[str, str]:
    """Split `contents` into (title, text): the first line is the title, the rest the text.

    wiki-18 writes titles in double quotes (`"Paris"`); the quotes are not part of the title.
    """
    first, _, rest = contents.partition("\n")
    title = first.strip()
    if len(title) >= 2 and title[0] == '"' and title[-1] == '"':
        title = title[1:-1].strip()
    return title, rest


def _row_to_doc(row: Any, where: str, position: int) -> tuple[str, str]:
    if not isinstance(row, dict):
        raise CorpusError(
            f"{where}: expected a JSON object with 'id' and 'contents', got {type(row).__name__}"
        )
    if "contents" not in row or row["contents"] is None:
        raise CorpusError(f"{where}: row has no 'contents' field (keys: {sorted(row)})")
    contents = row["contents"]
    if not isinstance(contents, str):
        raise CorpusError(f"{where}: 'contents' must be a string, got {type(contents).__name__}")
    # A missing id falls back to the row position: ids are only echoed back to clients.
    doc_id = row.get("id")
    return (str(position) if doc_id is None else str(doc_id)), contents


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _lines(handle: IO[str], path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines; a file that is not what its name says is one line naming it."""
    try:
        yield from enumerate(handle, start=1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise CorpusError(f"{path}: not a readable gzip file ({err})") from None
    except UnicodeDecodeError as err:  # decoded by the chunk: the line is not known, the byte is
        raise CorpusError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x})") from None


def _iter_jsonl(path: Path, progress: Any) -> Iterator[tuple[str, str]]:
    position = 0
    with _open_text(path) as handle:
        for line_no, line in _lines(handle, path):
            if progress is not None:
                progress.update(len(line.encode("utf-8")) if path.suffix != ".gz" else 1)
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise CorpusError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
            yield _row_to_doc(row, where, position)
            position += 1


def _iter_parquet(path: Path, progress: Any) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a bad file
        raise CorpusError(f"{path}: not a readable parquet file ({err})") from None
    names = handle.schema_arrow.names
    if "contents" not in names:
        raise CorpusError(f"{path}: parquet file has no 'contents' column (columns: {names})")
    columns = ["contents"] + (["id"] if "id" in names else [])
    position = 0
    for batch in handle.iter_batches(columns=columns, batch_size=8192):
        for row in batch.to_pylist():
            yield _row_to_doc(row, f"{path}: row {position}", position)
            position += 1
        if progress is not None:
            progress.update(batch.num_rows)


def read_corpus(path: str | Path, show_progress: bool = True) -> tuple[list[str], list[str]]:
    """Read a JSONL(.gz) or parquet corpus into parallel lists (ids, contents)."""
    from tqdm.auto import tqdm

    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: the corpus is a directory, not a file")
    if not path.is_file():
        raise CorpusError(f"{path}: corpus file not found")
    is_parquet = path.suffix == ".parquet"
    if is_parquet:
        import pyarrow.parquet as pq

        try:
            total: int | None = pq.ParquetFile(path).metadata.num_rows
        except Exception as err:
            raise CorpusError(f"{path}: not a readable parquet file ({err})") from None
        unit, scale = "doc", False
    elif path.suffix == ".gz":
        total, unit, scale = None, "line", False
    else:
        total, unit, scale = path.stat().st_size, "B", True
    ids: list[str] = []
    contents: list[str] = []
    with tqdm(total=total, unit=unit, unit_scale=scale, desc="read corpus", disable=not show_progress) as bar:
        rows = _iter_parquet(path, bar) if is_parquet else _iter_jsonl(path, bar)
        for doc_id, text in rows:
            ids.append(doc_id)
            contents.append(text)
    if not ids:
        raise CorpusError(f"{path}: corpus has no documents")
    return ids, contents


CORPUS_FILE = "corpus.arrow"


def write_corpus_store(
    index_dir: Path, ids: Sequence[str], contents: Sequence[str], chunk_rows: int = 65536
) -> Path:
    """Write the corpus into the index directory as an uncompressed Arrow file (mmap-able)."""
    import pyarrow as pa

    table = pa.table(
        {"id": pa.array(ids, pa.large_string()), "contents": pa.array(contents, pa.large_string())}
    )
    out = index_dir / CORPUS_FILE
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk_rows)
    return out


class CorpusStore:
    """Random access to the documents of an index directory by position."""

    def __init__(self, index_dir: Path) -> None:
        import pyarrow as pa

        path = index_dir / CORPUS_FILE
        if not path.is_file():
            raise IndexLoadError(f"{path}: corpus file missing from the index directory")
        try:
            self._table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        except Exception as err:
            raise IndexLoadError(f"{path}: corpus file is corrupt ({err})") from None
        if self._table.column_names[:2] != ["id", "contents"]:
            raise IndexLoadError(
                f"{path}: expected columns ['id', 'contents'], got {self._table.column_names}"
            )
        for name in ("id", "contents"):
            column = self._table.column(name)
            if not pa.types.is_large_string(column.type) or column.null_count:
                raise IndexLoadError(
                    f"{path}: column {name!r} must be large_string without nulls, not {column.type}"
                )
        # Per-chunk views of the raw Arrow buffers (int64 offsets, UTF-8 bytes, both memory-mapped):
        # a row is decoded straight from its bytes. ChunkedArray.take would concatenate every chunk
        # first (a copy of the corpus per request); a scalar's .as_py() costs ~3 us a row; and
        # Array.take loads Arrow's compute registry, ~37 MB more resident per server.
        self._ids = [_string_views(chunk) for chunk in self._table.column("id").chunks]
        self._texts = [_string_views(chunk) for chunk in self._table.column("contents").chunks]
        self._starts = np.cumsum([0] + [len(offsets) - 1 for offsets, _ in self._ids])

    def __len__(self) -> int:
        return self._table.num_rows

    def documents(self, positions: Sequence[int]) -> list[dict[str, str]]:
        """Rows at `positions`, in that order, as `{"id", "contents"}` dicts."""
        where = np.asarray(positions, dtype=np.int64)
        if where.size and (where.min() < 0 or where.max() >= len(self)):
            raise IndexError(f"document position out of range 0..{len(self) - 1}")
        chunk_of = np.searchsorted(self._starts, where, side="right") - 1
        rows = where - self._starts[chunk_of]
        # Byte ranges [id start, id end, text start, text end) per row, gathered chunk by chunk.
        spans = np.empty((len(where), 4), dtype=np.int64)
        for chunk in np.unique(chunk_of).tolist():
            mine = chunk_of == chunk
            (id_offsets, _), (text_offsets, _) = self._ids[chunk], self._texts[chunk]
            row = rows[mine]
            spans[mine] = np.stack(
                [id_offsets[row], id_offsets[row + 1], text_offsets[row], text_offsets[row + 1]], 1
            )
        return [
            {
                "id": str(self._ids[chunk][1][a:b], "utf-8"),
                "contents": str(self._texts[chunk][1][c:d], "utf-8"),
            }
            for chunk, (a, b, c, d) in zip(chunk_of.tolist(), spans.tolist(), strict=True)
        ]


def _string_views(chunk: Any) -> tuple[np.ndarray, memoryview]:
    """(offsets, bytes) of a large_string Arrow array: row i is bytes[offsets[i]:offsets[i + 1]]."""
    if len(chunk) == 0:  # an empty array may have no buffers at all
        return np.zeros(1, dtype=np.int64), memoryview(b"")
    _, offsets, data = chunk.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64)[chunk.offset : chunk.offset + len(chunk) + 1]
    return offsets, memoryview(data)
