"""Single-digit addition with the answer in `<answer>` tags: the default task.

Each prompt is a short chat: one worked example (`3 + 4 = 7. <answer>7</answer>`, other
numbers in every row), then the question. The untrained SmolLM2-135M-Instruct follows the
example only some of the time when sampling at temperature 1, rambles otherwise, and
slips often enough even when greedy that there is room to improve. What RL has to teach is
to reliably work the sum and close with the tag. There are just 100 distinct problems
(a, b in 0..9); validation uses all of them, training samples 80 with replacement (one
epoch = 10 steps of 8 prompts), so the val score measures the learned behaviour. Ten steps
are enough: the greedy validation score goes from 0.66 to 0.99 in two (benchmarks and the
trade-off: README, "What `turnrl train` does").

The example's numbers differ from row to row and its sum is never the asked one: a fixed
example is a trap the policy falls into (it learns to copy the example's answer).

The scorer (`compute_score`):

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

import random
import re
from typing import Any

DATA_SOURCE = "turnrl/addition"
QUESTION = "Compute {a} + {b}. Respond with only <answer>NUMBER</answer>."
WORKED = "{a} + {b} = {s}. <answer>{s}</answer>"
N_TRAIN = 80

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+")
FORMAT_ONLY = 0.1


def make_row(a: int, b: int, split: str, index: int, example: tuple[int, int] = (3, 4)) -> dict[str, Any]:
    c, d = example
    return {
        "data_source": DATA_SOURCE,
        "prompt": [
            {"role": "user", "content": QUESTION.format(a=c, b=d)},
            {"role": "assistant", "content": WORKED.format(a=c, b=d, s=c + d)},
            {"role": "user", "content": QUESTION.format(a=a, b=b)},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": split, "index": index, "a": a, "b": b, "example": c + d},
    }


def _example(rng: random.Random, a: int, b: int) -> tuple[int, int]:
    while True:
        c, d = rng.randint(0, 9), rng.randint(0, 9)
        if c + d != a + b:
            return c, d


def rows(split: str, seed: int, n_train: int = N_TRAIN) -> list[dict[str, Any]]:
    """`train`: `n_train` problems drawn from `seed`; `val`: all 100, each with its own example."""
    if split == "train":
        rng = random.Random(seed)
        train = []
        for i in range(n_train):
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            train.append(make_row(a, b, "train", i, _example(rng, a, b)))
        return train
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    val_rng = random.Random(10_000 + seed)
    return [make_row(a, b, "test", 10 * a + b, _example(val_rng, a, b)) for a in range(10) for b in range(10)]


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
