"""Preference rows -> (chosen, rejected) token ids, each the prompt followed by one response.

A row is `{prompt, chosen, rejected}`: the prompt as chat messages or plain text (read by the RL
loader's own rules), each response as text or an assistant message. A sequence is the prompt
rendered with the generation prompt, then the response's tokens, then EOS: exactly the ids the
RL trainer's reward model scores when the policy ends its answer, so the score is read at the
same token (the last one) in training and in RL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnrl.config.supervised_schema import RMDataConfig
from turnrl.data.dataset import DataError, _messages, _prompt_text, read_rows
from turnrl.supervised.rows import Overlong, none_left, required
from turnrl.workers.reward_model import rm_sequence


@dataclass
class Pair:
    chosen: list[int]
    rejected: list[int]


def load_pairs(files: list[str], tokenizer: Any, data: RMDataConfig) -> list[Pair]:
    """Every usable pair of `files`; pairs with a sequence over `data.max_length` dropped, and said."""
    out: list[Pair] = []
    reports = []
    for file in files:
        report = Overlong(file)
        for i, row in enumerate(read_rows(file)):
            pair = _pair(row, data, tokenizer, f"{file} row {i}")
            report.rows += 1
            longest = max(len(pair.chosen), len(pair.rejected))
            if longest > data.max_length:
                report.dropped.append(longest)
            else:
                out.append(pair)
        reports.append(report)
    if not out:
        raise none_left(reports, "pairs", data.max_length, "")
    for report in reports:  # said once the run can go on: when it cannot, the error says it all
        report.warn("pairs", data.max_length)
    return out


def _pair(row: dict[str, Any], data: RMDataConfig, tokenizer: Any, where: str) -> Pair:
    # both responses first: a row without them is the likelier mistake than a bad prompt
    chosen = _response(row, data.chosen_key, "data.chosen_key", where)
    rejected = _response(row, data.rejected_key, "data.rejected_key", where)
    messages = _messages(row, data.prompt_key, where)  # the RL loader's rules, so RM and RL see one prompt
    prompt = _prompt_text(tokenizer, messages, where)
    return Pair(rm_sequence(tokenizer, prompt, chosen), rm_sequence(tokenizer, prompt, rejected))


def _response(row: dict[str, Any], key: str, setting: str, where: str) -> str:
    value = required(row, key, setting, where, "preference row")
    if isinstance(value, list) and len(value) == 1:  # [{"role": "assistant", ...}], TRL's conversational form
        value = value[0]
    if isinstance(value, dict) and value.get("role", "assistant") == "assistant":
        value = value.get("content")
    if not isinstance(value, str):
        raise DataError(
            f"{where}: '{key}' ({setting}) must be text or an assistant message {{role, content}}"
        )
    return value
