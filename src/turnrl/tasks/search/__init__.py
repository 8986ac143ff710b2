"""Search-agent task over a corpus of invented facts.

Every question is about an invented entity (`corpus`), so the model can only answer by searching:
the retriever that agent runs start by default indexes the same corpus (`corpus.builtin_index`,
300 entities, seed 0). The prompt follows Search-R1's protocol (think, `<search>`, `<information>`,
`<answer>`); its example answer names nothing in the corpus, and the reward (Search-R1's exact
match, `turnrl.rewards.qa`) reads only the response anyway. `demos` scripts successful episodes
for a supervised cold start (`turnrl data search_sft`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

from turnrl.tasks.search.corpus import ENTITIES, SEED, builtin_qa

T = TypeVar("T")

DATA_SOURCE = "turnrl/search"
N_VAL = 128
PROMPT = (
    "Answer the question below. Think step by step inside <think> and </think> whenever you get new "
    "information. If you are missing a fact, search for it by writing <search> your query </search>; "
    "the top results come back between <information> and </information>. You may search several "
    "times. When you know the answer, write it between <answer> and </answer> with no explanation, "
    "for example <answer> Paris </answer>.\nQuestion: {question}\n"
)


def split_questions(questions: Sequence[T]) -> tuple[list[T], list[T]]:
    """(validation, training): the first `N_VAL` questions of `builtin_qa`'s order are held out."""
    return list(questions[:N_VAL]), list(questions[N_VAL:])


def make_row(question: str, answers: list[str], split: str, index: int, relation: str) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": PROMPT.format(question=question)}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": split, "index": index, "relation": relation},
    }


def rows(split: str, seed: int) -> list[dict[str, Any]]:
    """`val`: the held-out questions in corpus order; `train`: the rest, shuffled by `seed` (the
    corpus itself is fixed, so `seed` changes only the training order)."""
    qa = builtin_qa(ENTITIES, SEED)
    val, train = split_questions(list(enumerate(qa)))
    if split == "train":
        out = [make_row(q.question, list(q.answers), "train", i, q.relation) for i, q in train]
        random.Random(seed).shuffle(out)
        return out
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return [make_row(q.question, list(q.answers), "test", i, q.relation) for i, q in val]
