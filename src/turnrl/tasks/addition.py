"""Single-digit addition with the answer in `<answer>` tags: the default task.

Each prompt is a short chat: one worked example (`3 + 4 = 7. <answer>7</answer>`, other
numbers in every row), then the question. The untrained SmolLM2-135M-Instruct follows the
example only some of the time when sampling at temperature 1, rambles otherwise, and
slips often enough even when greedy that there is room to improve. What RL has to teach is
to reliably work the sum and close with the tag.

Validation is held out by the problem. There are 100 problems (a, b in 0..9); a fixed 20 of the
45 pairs {a, b} with a != b are validation's, both orders of each (`3+4` and `4+3`: one problem,
written twice), 40 problems in all, the same for every seed. Training draws 32 rows with
replacement from the other 60 problems (one epoch = 4 steps of 8 prompts), and the worked
examples, in training and validation prompts alike, are training problems only: no validation
problem or its answer is ever shown during training. `extra_info.problem` (`"3+4"`) names each
row's problem so anyone can check. Four steps are enough: on the held-out problems the greedy
accuracy went 0.675 -> 0.95 by step 2, stayed there at step 4 and drifted to 0.90-0.925 at steps
6-10 of a longer run at this learning rate (docs/results/default-job.md).

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

from turnrl.tasks.args import count_arg, reject_unknown

DATA_SOURCE = "turnrl/addition"
QUESTION = "Compute {a} + {b}. Respond with only <answer>NUMBER</answer>."
WORKED = "{a} + {b} = {s}. <answer>{s}</answer>"
N_TRAIN = 32
VAL_PAIRS = 20  # 40 of the 100 problems
HOLDOUT_SEED = 24_680  # fixed: every seed validates on the same problems
Problem = tuple[int, int]

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
        "extra_info": {
            "split": split,
            "index": index,
            "a": a,
            "b": b,
            "example": c + d,
            "problem": f"{a}+{b}",
        },
    }


def split_problems() -> tuple[list[Problem], list[Problem]]:
    """(training, validation) problems: `VAL_PAIRS` pairs {a, b}, a != b, drawn once from
    `HOLDOUT_SEED`, are validation's in both orders; everything else is training's."""
    pairs = [(a, b) for a in range(10) for b in range(a + 1, 10)]
    held = set(random.Random(HOLDOUT_SEED).sample(pairs, VAL_PAIRS))
    val = [(a, b) for a in range(10) for b in range(10) if (min(a, b), max(a, b)) in held]
    train = [(a, b) for a in range(10) for b in range(10) if (min(a, b), max(a, b)) not in held]
    return train, val


def _example(rng: random.Random, a: int, b: int, shown: list[Problem]) -> Problem:
    """A worked example from `shown` (training problems) whose sum is not the asked one."""
    while True:
        c, d = rng.choice(shown)
        if c + d != a + b:
            return c, d


def task_args(args: dict[str, Any]) -> int:
    """`n_train` from `data.task_args`, refusing unknown keys and a count that is not one (`args.count_arg`)."""
    reject_unknown(args, ("n_train",), "addition")
    return count_arg(args, "n_train", N_TRAIN, "addition")


def rows(split: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """`train`: `n_train` rows drawn from `seed` over the training problems; `val`: every held-out
    problem once, in (a, b) order, each with a worked example from the training problems."""
    n_train = task_args(args)  # its keywords come from data.task_args
    train_problems, val_problems = split_problems()
    if split == "train":
        rng = random.Random(seed)
        out = []
        for i in range(n_train):
            a, b = rng.choice(train_problems)
            out.append(make_row(a, b, "train", i, _example(rng, a, b, train_problems)))
        return out
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    val_rng = random.Random(10_000 + seed)
    return [
        make_row(a, b, "test", 10 * a + b, _example(val_rng, a, b, train_problems)) for a, b in val_problems
    ]


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
