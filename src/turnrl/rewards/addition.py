"""Scorer of the built-in addition task.

    1.0  the number in the last <answer> tag is the sum       (`acc`)
    0.1  a tag holding a wrong integer other than the worked example's answer (format credit)
    0.0  anything else: a right sum outside the tags, the example's answer copied, no tag

The format credit gives GRPO groups variance before the model is ever right, the way
Search-R1's format reward does. Two tempting credits are traps, both measured on the
default run: credit for a right sum outside the tags (the untrained model already states
the sum in plain text most of the time, so the policy stays there: 0 % tagged after 11
steps), and format credit for copying the example's number from the prompt (the policy
learns to copy within 7 steps and its entropy collapses before it finds the sums).
"""

from __future__ import annotations

import re
from typing import Any

from turnrl.data.tasks.addition import DATA_SOURCE as DATA_SOURCE  # what registry.BUILTIN routes here

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+")
FORMAT_ONLY = 0.1


def extract_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, Any]:
    truth = str(ground_truth).strip()
    answer = extract_answer(solution_str)
    tagged_int = answer is not None and NUMBER.fullmatch(answer) is not None
    example = (extra_info or {}).get("example") if isinstance(extra_info, dict) else None
    copied = tagged_int and example is not None and answer == str(example)
    if tagged_int and answer == truth:
        score = 1.0
    elif tagged_int and not copied:
        score = FORMAT_ONLY
    else:
        score = 0.0
    return {"score": score, "acc": float(score == 1.0), "formatted": float(tagged_int)}
