"""Scorer of the built-in addition task.

    1.0  the number in the last <answer> tag is the sum       (`acc`: the strict metric)
    0.3  no correct tag, but the last number in the text is the sum
    0.1  a tag holding a wrong integer
    0.0  anything else

The two partial credits give GRPO groups variance before the model is ever fully right,
the way Search-R1's format reward does, and rank being right above being well-formed, so
the policy cannot settle on a well-formed constant.
"""

from __future__ import annotations

import re
from typing import Any

from turnrl.data.tasks.addition import DATA_SOURCE
from turnrl.rewards.registry import register

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+")
CORRECT_UNTAGGED = 0.3
FORMAT_ONLY = 0.1


def extract_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


@register(DATA_SOURCE)
def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> dict[str, Any]:
    truth = str(ground_truth).strip()
    answer = extract_answer(solution_str)
    tagged_int = answer is not None and NUMBER.fullmatch(answer) is not None
    numbers = NUMBER.findall(solution_str)
    if tagged_int and answer == truth:
        score = 1.0
    elif numbers and numbers[-1] == truth:
        score = CORRECT_UNTAGGED
    elif tagged_int:
        score = FORMAT_ONLY
    else:
        score = 0.0
    return {"score": score, "acc": float(score == 1.0), "formatted": float(tagged_int)}
