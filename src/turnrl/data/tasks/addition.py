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
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

DATA_SOURCE = "turnrl/addition"
QUESTION = "Compute {a} + {b}. Respond with only <answer>NUMBER</answer>."
WORKED = "{a} + {b} = {s}. <answer>{s}</answer>"


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


def write(out_dir: Path, seed: int, n_train: int = 80) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    train = []
    for i in range(n_train):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        train.append(make_row(a, b, "train", i, _example(rng, a, b)))
    val_rng = random.Random(10_000 + seed)
    val = [make_row(a, b, "test", 10 * a + b, _example(val_rng, a, b)) for a in range(10) for b in range(10)]
    paths = out_dir / "addition_train.jsonl", out_dir / "addition_val.jsonl"
    for path, rows in zip(paths, (train, val), strict=True):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)  # never leave a half-written file behind
    return paths
