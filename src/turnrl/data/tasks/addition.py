"""Single-digit addition with the answer in `<answer>` tags: the default task.

Chosen so that a 135M model learns it on a CPU in minutes and the gain is unmistakable:
the untrained SmolLM2-135M-Instruct sometimes states the right sum but almost never in
the tags (greedy: 0 %), so the score rises only if RL changes its behaviour. There are
just 100 distinct problems (a, b in 0..9); validation uses all of them, training samples
them with replacement, so the val score measures the learned behaviour.

Each prompt shows the format with an example number that is never the right sum and
differs from row to row: a fixed example ("<answer>12</answer>") is a trap the policy
falls into, answering 12 to everything for the format credit.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

DATA_SOURCE = "turnrl/addition"
PROMPT = (
    "Compute {a} + {b}. Respond with only <answer>NUMBER</answer>, for example <answer>{example}</answer>."
)


def make_row(a: int, b: int, split: str, index: int, example: int = 12) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": PROMPT.format(a=a, b=b, example=example)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": split, "index": index, "a": a, "b": b, "example": example},
    }


def _example(rng: random.Random, a: int, b: int) -> int:
    return rng.choice([k for k in range(19) if k != a + b])


def write(out_dir: Path, seed: int, n_train: int = 2048) -> tuple[Path, Path]:
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
