"""Question-answering rewards (Search-R1's `qa_em`): exact match, substring match or token F1.

Answers are compared after the usual SQuAD-style normalisation: lower case, punctuation removed,
articles (a, an, the) removed, whitespace collapsed. The answer is the content of the LAST
`<answer>` tag of the response. `solution_str` is the response text only (turnrl never passes the
prompt), so the example answer a prompt shows ("For example, <answer> Beijing </answer>") can
never be scored as the model's answer; Search-R1 scored the prompt too and had to skip the first tag.

Ground truth: `{"target": [answers]}` (Search-R1), a list of answers, or one string.
Options per row in `extra_info`: `qa_metric` (`em` | `subem` | `f1`, default `em`) and
`format_score` (credit for a well-formed but wrong answer, default 0).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
METRICS = ("em", "subem", "f1")

# Search-R1's data sources, all scored by exact match
SEARCH_R1_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def targets(ground_truth: Any) -> list[str]:
    """Accepted answers from `{"target": [...]}`, a list/array, or a string."""
    if isinstance(ground_truth, dict):
        if "target" not in ground_truth:
            raise ValueError(f"qa ground truth dict needs a 'target' key, got keys {sorted(ground_truth)}")
        ground_truth = ground_truth["target"]
    if isinstance(ground_truth, str):
        return [ground_truth]
    if isinstance(ground_truth, Iterable):  # lists, tuples, numpy arrays read from parquet
        return [str(g) for g in ground_truth]
    return [str(ground_truth)]


def em_check(prediction: str, answers: list[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(a) == pred for a in answers))


def subem_check(prediction: str, answers: list[str]) -> float:
    """1 when a normalised gold answer occurs inside the normalised prediction."""
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(a) and normalize_answer(a) in pred for a in answers))


def f1_score(prediction: str, answers: list[str]) -> float:
    """Best token-level F1 over the gold answers (SQuAD's definition)."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(pred_tokens) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(pred_tokens), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def extract_answer(solution_str: str) -> str | None:
    found = ANSWER.findall(solution_str)
    return found[-1].strip() if found else None


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    method: str | None = None,
    format_score: float | None = None,
) -> dict[str, float]:
    info = extra_info if isinstance(extra_info, dict) else {}
    method = method or str(info.get("qa_metric", "em"))
    if method not in METRICS:
        raise ValueError(f"qa_metric must be one of {', '.join(METRICS)}, got '{method}'")
    fmt = float(info.get("format_score", 0.0) if format_score is None else format_score)
    answers = targets(ground_truth)
    answer = extract_answer(solution_str)
    if answer is None:
        return {"score": 0.0, "em": 0.0, "subem": 0.0, "f1": 0.0, "formatted": 0.0}
    metrics = {
        "em": em_check(answer, answers),
        "subem": subem_check(answer, answers),
        "f1": f1_score(answer, answers),
    }
    score = metrics[method]
    if score == 0.0:
        score = fmt  # well-formed but wrong: the optional format credit
    return {"score": score, **metrics, "formatted": 1.0}
