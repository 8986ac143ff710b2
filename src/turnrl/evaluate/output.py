"""The files `turnrl eval` writes, each under a temporary name and renamed when complete: a reader
never sees half a file, and an interrupted evaluation leaves no `samples.jsonl` that looks whole."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from turnrl.agent.assemble import EPISODE_FIELDS
from turnrl.batch import Batch


def _jsonable(value: Any) -> Any:
    """numpy values (parquet rows hold arrays) as plain lists and numbers; anything else as text."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_jsonable) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class SampleWriter:
    """`samples.jsonl`, one row per response, streamed to `.samples.jsonl.tmp` and renamed on a
    clean exit; removed on an error."""

    def __init__(self, path: Path):
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")
        self.rows = 0
        self._fh: IO[str] | None = None

    def __enter__(self) -> SampleWriter:
        self._fh = self.tmp.open("w", encoding="utf-8")
        return self

    def write(self, row: dict[str, Any]) -> None:
        assert self._fh is not None
        self._fh.write(json.dumps(row, default=_jsonable) + "\n")
        self.rows += 1

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._fh is not None
        self._fh.close()
        if kind is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def sample_row(
    pass_name: str, batch: Batch, row: int, n: int, prompt_index: int, response: str, score: float
) -> dict[str, Any]:
    """One response: which pass and prompt it belongs to, the texts, its score; in agent mode also
    the episode's turns, tool calls, invalid actions, tool errors and whether it ran out of budget."""
    out: dict[str, Any] = {
        "pass": pass_name,
        "prompt_index": prompt_index,
        "sample": row % n,
        "data_source": batch["data_source"][row],
        "index": batch["index"][row],
        "prompt": batch["raw_prompt"][row],
        "response": response,
        "score": score,
        "ground_truth": batch["ground_truth"][row],
        "finish_reason": batch["finish_reason"][row],
    }
    for key in EPISODE_FIELDS:
        if key in batch:
            out[key.removeprefix("agent_")] = batch[key][row]
    return out
