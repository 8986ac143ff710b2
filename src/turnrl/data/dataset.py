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


def check_data_file(path: str | Path, key: str = "") -> None:
    """Raise DataError unless `path` is a file, naming it (and `key`, the setting that gave it)."""
    named = f" ({key})" if key else ""
    if Path(path).is_dir():
        raise DataError(f"data file {path} is a directory, not a file{named}")
    if not Path(path).is_file():
        raise DataError(f"data file not found: {path}{named}")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    check_data_file(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows = _read_parquet(path)
    elif suffix in (".jsonl", ".json"):
        rows = _read_jsonl(path)
    else:
        raise DataError(f"unsupported data file type '{suffix}' for {path}; use .parquet or .jsonl")
    if not rows:  # an empty split is a mistake (a failed export, a wrong path), not a dataset
        raise DataError(f"data file {path} has no rows")
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise DataError(f"cannot read parquet file {path}: {str(err).splitlines()[0]}") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open("rb") as fh:  # bytes: a bad byte is then reported with its line, not a traceback
        for lineno, raw in enumerate(fh, 1):
            line = _decode_line(raw, path, lineno).rstrip()  # no newline: a column is then this line's
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                hint = _jsonl_hint(line, lineno, path.suffix)
                raise DataError(
                    f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.pos + 1}){hint}"
                ) from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: a row must be a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def _decode_line(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        byte = raw[err.start : err.start + 1].hex()
        raise DataError(
            f"{path}:{lineno}: not UTF-8 text (byte 0x{byte} at column {err.start + 1}); save the file as UTF-8"
        ) from None


def _jsonl_hint(line: str, lineno: int, suffix: str) -> str:
    # a pretty-printed .json array is the likeliest cause of a bad first line
    if lineno == 1 and line.lstrip().startswith(("[", "{")) and suffix.lower() == ".json":
        return "; rows must be one JSON object per line (JSONL), not one JSON document"
    return ""


ROLES = ("system", "user", "assistant", "tool")
"""The chat roles a row's messages may have (RL prompts, RM prompts and SFT conversations alike)."""


def _messages(row: dict[str, Any], prompt_key: str, where: str) -> list[dict[str, str]]:
    prompt = row.get(prompt_key)
    if prompt is None:
        fields = ", ".join(sorted(map(str, row))) or "none"
        raise DataError(f"{where}: row has no '{prompt_key}' field (data.prompt_key); its fields: {fields}")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt:
        raise DataError(f"{where}: '{prompt_key}' must be a non-empty list of {{role, content}} messages")
    for j, m in enumerate(prompt):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(
                f"{where}: every '{prompt_key}' message needs 'role' and 'content', got {m!r:.80}"
            )
        # checked, not converted: str() would hand the model "['a', 'b']" or "None" as its prompt
        if m["role"] not in ROLES:
            raise DataError(f"{where}: '{prompt_key}' message {j} needs a 'role' of {', '.join(ROLES)}; got {m['role']!r:.40}")  # fmt: skip
        if not isinstance(m["content"], str):
            raise DataError(f"{where}: '{prompt_key}' message {j} ('{m['role']}') content must be text, got {type(m['content']).__name__}")  # fmt: skip
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def _ground_truth(row: dict[str, Any], where: str) -> Any:
    rm = row.get("reward_model")
    if isinstance(rm, dict) and "ground_truth" in rm and rm["ground_truth"] is not None:
        return rm["ground_truth"]
    raise DataError(f"{where}: row has no 'reward_model.ground_truth'")


def load_examples(
    files: list[str], tokenizer: Any, max_prompt_length: int, prompt_key: str = "prompt"
) -> list[Example]:
    """Read, check and tokenise every row; drop (and log, per file) prompts over the length limit."""
    if not files:
        raise DataError("no data files given")
    examples: list[Example] = []
    over: list[int] = []  # token counts of the dropped prompts, all files
    for file in files:
        kept, dropped = _file_examples(file, tokenizer, max_prompt_length, prompt_key)
        examples += kept
        over += dropped
        if dropped:
            log.warning(
                "dropped %d prompt(s) longer than data.max_prompt_length=%d tokens in %s (of %d rows; longest %d)",
                len(dropped), max_prompt_length, file, len(kept) + len(dropped), max(dropped),
            )  # fmt: skip
    if not examples:
        raise DataError(
            f"every prompt in {', '.join(map(str, files))} is longer than data.max_prompt_length="
            f"{max_prompt_length} tokens ({len(over)} dropped, longest {max(over)}); raise data.max_prompt_length"
        )
    return examples


def _file_examples(
    file: str, tokenizer: Any, max_prompt_length: int, prompt_key: str
) -> tuple[list[Example], list[int]]:
    """The examples of one file, and the token counts of the prompts dropped as too long."""
    kept: list[Example] = []
    dropped: list[int] = []
    for i, row in enumerate(read_rows(file)):
        where = f"{file} row {i}"
        messages = _messages(row, prompt_key, where)
        truth = _ground_truth(row, where)
        ids = tokenizer(_prompt_text(tokenizer, messages, where), add_special_tokens=False)["input_ids"]
        if len(ids) > max_prompt_length:
            dropped.append(len(ids))
            continue
        extra = row.get("extra_info") or {}
        if not isinstance(extra, dict):
            raise DataError(f"{where}: 'extra_info' must be an object, got {type(extra).__name__}")
        kept.append(
            Example(
                prompt_ids=ids,
                data_source=str(row.get("data_source", "unknown")),
                ground_truth=truth,
                extra_info=extra,
                index=extra.get("index", f"{Path(file).name}:{i}"),
                raw_prompt=messages,
            )
        )
    return kept, dropped


def _prompt_text(tokenizer: Any, messages: list[dict[str, str]], where: str) -> str:
    try:
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    except Exception as err:
        # ValueError: no template at all; jinja2's TemplateError: the template rejects these messages
        if not isinstance(err, ValueError) and not type(err).__module__.startswith("jinja2"):
            raise
        if getattr(tokenizer, "chat_template", "") is None:  # a base model's Hugging Face tokenizer
            name = getattr(tokenizer, "name_or_path", "") or "model.path"
            reason = f"the tokenizer of {name} has none (a base model?); chat-format prompts need an instruct model"
        else:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{where}: cannot apply the tokenizer's chat template: {reason}") from None
