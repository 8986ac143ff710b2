"""GSM8K (openai/gsm8k: `question`, `answer` ending in `#### <number>`) as verl's
`examples/data_preprocess/gsm8k.py` writes it."""

from __future__ import annotations

import re
from typing import Any

from turnrl.data.prepare.rows import SkipRow, text_field, verl_row

DATA_SOURCE = "openai/gsm8k"
SOURCES = (DATA_SOURCE,)
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
# the first '#### ' followed by a signed number with dots and thousands commas, as verl matches it
_FINAL = re.compile(r"#### (-?[0-9.,]+)")


def final_answer(answer: str) -> str:
    """The number after the first `#### `, commas removed: "... #### 1,250" -> "1250"."""
    found = _FINAL.search(answer)
    if found is None:
        raise SkipRow("answer has no '#### <number>'")
    return found.group(1).replace(",", "")


def to_row(example: dict[str, Any], split: str, index: int, data_source: str) -> dict[str, Any]:
    question, answer = text_field(example, "question"), text_field(example, "answer")
    return verl_row(
        example,
        ("question", "answer"),
        data_source=data_source,
        prompt=f"{question} {INSTRUCTION}",
        ability="math",
        ground_truth=final_answer(answer),
        # verl keeps the raw question and worked answer here (e.g. for SFT on the same file)
        extra_info={"split": split, "index": index, "answer": answer, "question": question},
    )
