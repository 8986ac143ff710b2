"""verl-format rows -> tokenised prompts.

A row is `{data_source, prompt: [{role, content}], ability, reward_model: {style,
ground_truth}, extra_info: {split, index, ...}}` in parquet or JSONL. Rows are checked when
they are read, so a bad file stops the run at start-up with the file and row named.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError

log = logging.getLogger(__name__)


class DataError(TurnrlInputError):
    """A missing or malformed data file; the message names the file and row."""


@dataclass
class Example:
    prompt_ids: list[int]
    data_source: str
    ground_truth: Any
    extra_info: dict[str, Any]
    index: Any
    raw_prompt: list[dict[str, str]]


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow raises several types for a corrupt file
            raise DataError(f"cannot read parquet file {path}: {str(err).splitlines()[0]}") from None
    if suffix in (".jsonl", ".json"):
        rows = []
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise DataError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{lineno}: a row must be a JSON object, got {type(row).__name__}")
                rows.append(row)
        return rows
    raise DataError(f"unsupported data file type '{suffix}' for {path}; use .parquet or .jsonl")


def _messages(row: dict[str, Any], prompt_key: str, where: str) -> list[dict[str, str]]:
    prompt = row.get(prompt_key)
    if prompt is None:
        raise DataError(f"{where}: row has no '{prompt_key}' field")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt:
        raise DataError(f"{where}: '{prompt_key}' must be a non-empty list of {{role, content}} messages")
    for m in prompt:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(
                f"{where}: every '{prompt_key}' message needs 'role' and 'content', got {m!r:.80}"
            )
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]


def _ground_truth(row: dict[str, Any], where: str) -> Any:
    rm = row.get("reward_model")
    if isinstance(rm, dict) and "ground_truth" in rm and rm["ground_truth"] is not None:
        return rm["ground_truth"]
    raise DataError(f"{where}: row has no 'reward_model.ground_truth'")


def load_examples(
    files: list[str], tokenizer: Any, max_prompt_length: int, prompt_key: str = "prompt"
) -> list[Example]:
    """Read, check and tokenise every row; drop (and log) prompts over the length limit."""
    if not files:
        raise DataError("no data files given")
    examples: list[Example] = []
    dropped = 0
    for file in files:
        for i, row in enumerate(read_rows(file)):
            where = f"{file} row {i}"
            messages = _messages(row, prompt_key, where)
            truth = _ground_truth(row, where)
            try:
                text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            except ValueError as err:  # e.g. a base model's tokenizer has no chat template
                raise DataError(
                    f"{where}: cannot apply the tokenizer's chat template: {str(err).splitlines()[0]}"
                ) from None
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) > max_prompt_length:
                dropped += 1
                continue
            extra = row.get("extra_info") or {}
            if not isinstance(extra, dict):
                raise DataError(f"{where}: 'extra_info' must be an object, got {type(extra).__name__}")
            examples.append(
                Example(
                    prompt_ids=ids,
                    data_source=str(row.get("data_source", "unknown")),
                    ground_truth=truth,
                    extra_info=extra,
                    index=extra.get("index", f"{Path(file).name}:{i}"),
                    raw_prompt=messages,
                )
            )
    if dropped:
        log.warning(
            "dropped %d prompt(s) longer than data.max_prompt_length=%d tokens", dropped, max_prompt_length
        )
    if not examples:
        raise DataError(
            f"no usable rows in {files} (dropped {dropped} over max_prompt_length={max_prompt_length})"
        )
    return examples


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad id lists into (ids, attention_mask) so every prompt ends at the same column."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[r, width - len(s) :] = 1
    return ids, mask


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Positions count real tokens only, so left padding does not shift them."""
    return (mask.cumsum(-1) - 1).clamp(min=0) * mask
