"""Calculator-agent task: multiplications too large for a small model to do in its head.

`Compute 4821 * 739.` with a calculator tool (`<calculator>4821 * 739</calculator>` ->
`<result>3562719</result>`) and the answer in `<answer>` tags. A 135M model essentially never
multiplies 3-4 digit numbers right unaided, so a rising score means the policy learned to call
the tool and copy its result. The prompt shows the whole protocol once, with other numbers, so
the untrained model already succeeds now and then and GRPO has signal.

The tool is the agent loop's built-in `calculator` (no server); the scorer is `compute_score`.
"""

from __future__ import annotations

import random
import re
from typing import Any

from turnrl.tasks.args import count_arg, reject_unknown

DATA_SOURCE = "turnrl/calculator"
SYSTEM = (
    "You solve arithmetic with a calculator. Write <calculator>EXPRESSION</calculator>; the result comes "
    "back as <result>NUMBER</result>. Then answer with <answer>NUMBER</answer>."
)
QUESTION = "Compute {a} * {b}."
N_TRAIN, N_VAL = 2048, 64

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
FORMAT_SCORE = 0.1
TOOL_SCORE = 0.5
_INTEGER = re.compile(r"[-+]?\d+")


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
        "extra_info": {
            "split": split,
            "index": index,
            "a": a,
            "b": b,
            "problem": problem_key(a, b),
            "example": problem_key(x, y),
        },
    }


def problem_key(a: int, b: int) -> str:
    """`"739*4821"`: one key for both orders of a product (the same problem)."""
    return f"{min(a, b)}*{max(a, b)}"


def _seen(rows: list[dict[str, Any]]) -> set[str]:
    """Every product a row shows: the one it asks and its worked example's."""
    return {r["extra_info"][k] for r in rows for k in ("problem", "example")}


def task_args(args: dict[str, Any]) -> tuple[int, int]:
    """(n_train, n_val) from `data.task_args`, refusing unknown keys and a count that is not one
    (`args.count_arg`)."""
    reject_unknown(args, ("n_train", "n_val"), "calculator")
    return count_arg(args, "n_train", N_TRAIN, "calculator"), count_arg(args, "n_val", N_VAL, "calculator")


def rows(split: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """`train` from `seed`, `val` from `10_000 + seed`; validation indices follow the training ones.

    Held out by the problem: a validation product that training asks or shows as its example (in
    either order) is drawn again, so `extra_info.problem` never repeats across the splits (with
    8.1 million products a collision is rare, but the guarantee should not rest on luck)."""
    n_train, n_val = task_args(args)  # its keywords come from data.task_args
    rng = random.Random(seed)
    train = [make_row(rng, "train", i) for i in range(n_train)]
    if split == "train":
        return train
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    seen, val_rng, val = _seen(train), random.Random(10_000 + seed), []
    while len(val) < n_val:
        row = make_row(val_rng, "test", n_train + len(val))
        if row["extra_info"]["problem"] not in seen:
            val.append(row)
    return val


def _last_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float]:
    """Ranked credit:

        1.0  the exact integer in the last answer tag                  (`acc`)
        0.5  no right answer, but the calculator returned the right number (`<result>N</result>`)
        0.1  a tagged wrong integer
        0.0  anything else

    The middle credit rewards a correct tool call before the model has learned to copy the result
    into its answer, so GRPO groups differ from the first step; it cannot be had without the tool,
    since the model cannot produce the product itself.
    """
    truth = int(str(ground_truth).strip())
    answer = _last_answer(solution_str)
    value = answer.replace(",", "").replace(" ", "") if answer is not None else None
    tagged_int = value is not None and _INTEGER.fullmatch(value) is not None
    correct = tagged_int and int(value) == truth  # type: ignore[arg-type]
    tool_right = f"<result>{truth}</result>" in solution_str
    if correct:
        score = 1.0
    elif tool_right:
        score = TOOL_SCORE
    elif tagged_int:
        score = FORMAT_SCORE
    else:
        score = 0.0
    return {
        "score": score,
        "acc": float(correct),
        "formatted": float(tagged_int),
        "called_tool": float("<result>" in solution_str),
        "tool_right": float(tool_right),
    }
