"""Calculator-agent task: multiplications too large for a small model to do in its head.

`Compute 4821 * 739.` with a calculator tool (`<calculator>4821 * 739</calculator>` ->
`<result>3562719</result>`) and the answer in `<answer>` tags. A 135M model essentially never
multiplies 3-4 digit numbers right unaided, so a rising score means the policy learned to call
the tool and copy its result. The prompt shows the whole protocol once, with other numbers, so
the untrained model already succeeds now and then and GRPO has signal.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

DATA_SOURCE = "turnrl/calculator"
SYSTEM = (
    "You solve arithmetic with a calculator. Write <calculator>EXPRESSION</calculator>; the result comes "
    "back as <result>NUMBER</result>. Then answer with <answer>NUMBER</answer>."
)
QUESTION = "Compute {a} * {b}."


def _operand(rng: random.Random) -> int:
    return rng.randint(100, 9999)


def make_row(rng: random.Random, split: str, index: int) -> dict[str, Any]:
    a, b, x, y = (_operand(rng) for _ in range(4))
    # one worked exchange as chat turns: a 135M model follows a shown turn far more often than a
    # described format (measured: about half its samples call the tool, against none without it)
    example = f"<calculator>{x} * {y}</calculator>\n\n<result>{x * y}</result>\n\n<answer>{x * y}</answer>"
    return {
        "data_source": DATA_SOURCE,
        "prompt": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION.format(a=x, b=y)},
            {"role": "assistant", "content": example},
            {"role": "user", "content": QUESTION.format(a=a, b=b)},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a * b)},
        "extra_info": {"split": split, "index": index, "a": a, "b": b},
    }


def write(out_dir: Path, seed: int, n_train: int = 2048, n_val: int = 64) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rng, val_rng = random.Random(seed), random.Random(10_000 + seed)
    train = [make_row(rng, "train", i) for i in range(n_train)]
    val = [make_row(val_rng, "test", n_train + i) for i in range(n_val)]
    paths = out_dir / "calculator_train.jsonl", out_dir / "calculator_val.jsonl"
    for path, rows in zip(paths, (train, val), strict=True):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)
    return paths
