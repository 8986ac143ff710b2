"""Writing the converted splits: one parquet file per split, each complete or absent.

Every file is written under a hidden temporary name first and renamed into place only once all of
them are written, so an interrupted or failed run leaves no half-written split behind (a rename
within one folder is atomic).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from turnrl.data.dataset import DataError
from turnrl.runtime import ensure_writable_dir


def check_out_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise DataError(f"--out {out} exists and is not empty; choose a new directory or pass --overwrite")
    ensure_writable_dir(out, "--out", DataError)  # before any row is read or generated


def to_table(rows: list[dict[str, Any]], name: str) -> pa.Table:
    """Columns are the union of the rows' keys in first-seen order (pyarrow's `from_pylist` would take
    the first row's keys only and drop a column that only later rows have)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    arrays = {}
    for col in columns:
        try:
            arrays[col] = pa.array([row.get(col) for row in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            reason = str(err).splitlines()[0]
            raise DataError(f"{name}: column '{col}' holds values of different types ({reason})") from None
    return pa.table(arrays)


def write_splits(tables: dict[str, pa.Table], out: Path) -> list[Path]:
    """Write `<split>.parquet` for every table; returns the paths written."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        for split, table in tables.items():
            final = out / f"{split}.parquet"
            tmp = out / f".{final.name}.tmp-{os.getpid()}"
            staged.append((tmp, final))
            pq.write_table(table, tmp)
        for tmp, final in staged:
            os.replace(tmp, final)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return [final for _, final in staged]
