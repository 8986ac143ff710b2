"""Math answers checked by `math-verify` (symbolic and numeric equivalence: 1/2 == 0.5 == \\frac{1}{2}).

The model's answer is the last `<answer>` tag of the response if there is one, otherwise whatever
math-verify extracts from the whole response (a `\\boxed{}` first). The ground truth is a string
(LaTeX or plain); it is parsed as if boxed, so a bare `\\frac{1}{2}` is read as LaTeX.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math")


def _last_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def verify_math(response: str, ground_truth: str) -> bool:
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only the main thread may set
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    truth = str(ground_truth).strip()
    gold = parse(
        truth if "\\boxed" in truth or "$" in truth else f"\\boxed{{{truth}}}", parsing_timeout=timeout
    )
    if not gold:
        gold = parse(truth, parsing_timeout=timeout)
    answer = _last_answer(response)
    pred = parse(answer if answer is not None else response, parsing_timeout=timeout)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=timeout))


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float]:
    correct = verify_math(solution_str, ground_truth)
    return {
        "score": float(correct),
        "acc": float(correct),
        "formatted": float(_last_answer(solution_str) is not None),
    }
