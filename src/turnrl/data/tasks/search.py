"""Search-agent task over the built-in corpus of invented facts (`turnrl.servers.retriever.builtin_corpus`).

Every question is about an invented entity, so the model can only answer by searching: the
retriever that agent runs start by default indexes the same corpus (300 entities, seed 0).
The prompt follows Search-R1's protocol (think, `<search>`, `<information>`, `<answer>`); its
example answer names nothing in the corpus, and the reward reads only the response anyway.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

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


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def write(out_dir: Path, seed: int) -> tuple[Path, Path]:
    from turnrl.agent.tools.search import BUILTIN_ENTITIES, BUILTIN_SEED
    from turnrl.servers.retriever.builtin_corpus import builtin_qa

    out_dir.mkdir(parents=True, exist_ok=True)
    qa = builtin_qa(BUILTIN_ENTITIES, BUILTIN_SEED)  # the corpus is fixed; `seed` only orders training
    rows = [make_row(q.question, list(q.answers), "", i, q.relation) for i, q in enumerate(qa)]
    val, train = split_questions(rows)
    for r in val:
        r["extra_info"]["split"] = "test"
    for r in train:
        r["extra_info"]["split"] = "train"
    random.Random(seed).shuffle(train)
    paths = out_dir / "search_train.jsonl", out_dir / "search_val.jsonl"
    _write(paths[0], train)
    _write(paths[1], val)
    return paths
