"""GSM8K as verl scores it: the prompt asks for the final answer after "####", so the answer is the
number after the last "#### " in the response (commas and dollar signs dropped), compared as a string
with the ground truth that `turnrl data gsm8k` wrote. No "####" means no answer: score 0.

Only the response's last 300 characters are searched, as verl does: a model that repeats the
prompt's own "####" instruction early does not get credit for it.
"""

from __future__ import annotations

import re
from typing import Any

DATA_SOURCE = "openai/gsm8k"
TAIL_CHARS = 300
_FINAL = re.compile(r"#### (-?[0-9.,]+)")


def extract_answer(response: str) -> str | None:
    """The number after the last "#### " of the response's tail, normalised; None when absent."""
    found = _FINAL.findall(response[-TAIL_CHARS:])
    return found[-1].replace(",", "").replace("$", "") if found else None


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float]:
    answer = extract_answer(solution_str)
    correct = answer is not None and answer == str(ground_truth).strip()
    return {"score": float(correct), "acc": float(correct), "formatted": float(answer is not None)}
