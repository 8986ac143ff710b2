"""FlashRAG question-answering sets (`id`, `question`, `golden_answers`) as Search-R1's
`scripts/data_process/nq_search.py` and its nq+hotpotqa merge scripts write them."""

from __future__ import annotations

from typing import Any

from turnrl.data.prepare.rows import BadRow, SkipRow, text_field, verl_row
from turnrl.rewards.qa import SEARCH_R1_SOURCES

SOURCES = SEARCH_R1_SOURCES  # the names the reward registry scores by exact match
TRAIN_SOURCES = ("nq", "hotpotqa")  # Search-R1's nq_hotpotqa recipe trains on these two
# Search-R1's "base" template, verbatim: a trained checkpoint expects exactly this text ("as your want" included)
PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can call "
    "a search engine by <search> query </search> and it will return the top searched results between "
    "<information> and </information>. You can search as many times as your want. If you find no "
    "further external knowledge needed, you can directly provide the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: {question}\n"
)


def question_text(question: str) -> str:
    """Stripped, ending in '?': Search-R1 rewrites the row's own `question` column the same way."""
    question = question.strip()
    if not question:
        raise SkipRow("question is empty")
    return question if question.endswith("?") else question + "?"


def golden_answers(example: dict[str, Any]) -> list[str]:
    if "golden_answers" not in example:
        raise BadRow(f"row has no 'golden_answers' field; its fields: {', '.join(sorted(map(str, example)))}")
    answers = example["golden_answers"]
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise BadRow(f"'golden_answers' must be a list of strings, got {answers!r:.80}")
    if not answers:
        raise SkipRow("golden_answers is empty")  # no response could ever score
    return answers


def to_row(example: dict[str, Any], split: str, index: int, data_source: str) -> dict[str, Any]:
    question = question_text(text_field(example, "question"))
    answers = golden_answers(example)
    return verl_row(
        {**example, "question": question},
        (),  # nothing popped: id, the rewritten question and golden_answers stay as columns
        data_source=data_source,
        prompt=PROMPT.format(question=question),
        ability="fact-reasoning",
        ground_truth={"target": answers},
        extra_info={"split": split, "index": index},
    )
