"""Scorer of the built-in addition task: the number in the last `<answer>` tag."""

from __future__ import annotations

import re
from typing import Any

from turnrl.data.tasks.addition import DATA_SOURCE
from turnrl.rewards.registry import register

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
FORMAT_SCORE = 0.1
"""Partial credit for a well-formed answer tag with a wrong number: it gives GRPO groups
variance before the model is ever right, the way Search-R1's format reward does."""


def extract_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


@register(DATA_SOURCE)
def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, Any]:
    answer = extract_answer(solution_str)
    correct = answer is not None and answer == str(ground_truth).strip()
    score = 1.0 if correct else FORMAT_SCORE if answer is not None else 0.0
    return {"score": score, "acc": float(correct), "formatted": float(answer is not None)}
