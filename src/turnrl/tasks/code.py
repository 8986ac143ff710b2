"""Code-agent task (Code-R1 style): small stdin/stdout programming problems with hidden tests.

The model may run code while it works (`<code>...</code>` -> `<observation>...</observation>`) and
gives its final program in a ```python block inside `<answer>`. The scorer is the generic code scorer
(`turnrl.rewards.code`, which also scores Code-R1's public sources): it runs that program on every
hidden test in the sandbox, the one the `python` tool uses when the run binds it. Each row shows one
worked example of the problem; the tests are other inputs, so printing the example's output does not
pass.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DATA_SOURCE = "turnrl/code"
N_TRAIN = 512
PROMPT = (
    "Solve the programming problem below with a Python program that reads standard input and writes "
    "standard output. You can test code by writing it between <code> and </code>; what it prints comes "
    "back between <observation> and </observation>. Give your final program in a ```python code block "
    "inside <answer> and </answer>.\n\nProblem: {statement}\n\nExample input:\n{example_in}\nExample output:\n{example_out}\n"
)


@dataclass(frozen=True)
class Problem:
    name: str
    statement: str
    make_input: Callable[[random.Random], str]
    solve: Callable[[str], str]


def _ints(rng: random.Random, k: int, lo: int = -50, hi: int = 99) -> str:
    return " ".join(str(rng.randint(lo, hi)) for _ in range(k))


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdeiou") for _ in range(n))


PROBLEMS = (
    Problem("sum", "The input is one line of integers separated by spaces. Print their sum.",
            lambda r: _ints(r, r.randint(2, 8)), lambda s: str(sum(map(int, s.split())))),
    Problem("max", "The input is one line of integers separated by spaces. Print the largest.",
            lambda r: _ints(r, r.randint(2, 8)), lambda s: str(max(map(int, s.split())))),
    Problem("reverse", "The input is one word. Print it reversed.",
            lambda r: _word(r, r.randint(3, 9)), lambda s: s.strip()[::-1]),
    Problem("vowels", "The input is one word of lowercase letters. Print how many of its letters are vowels (a, e, i, o, u).",
            lambda r: _word(r, r.randint(3, 12)), lambda s: str(sum(c in "aeiou" for c in s.strip()))),
    Problem("factorial", "The input is an integer n (0 <= n <= 20). Print n! (n factorial).",
            lambda r: str(r.randint(0, 20)), lambda s: str(math.factorial(int(s)))),
    Problem("digits", "The input is a non-negative integer. Print the sum of its decimal digits.",
            lambda r: str(r.randint(0, 10**12)), lambda s: str(sum(int(c) for c in s.strip()))),
    Problem("gcd", "The input is two positive integers on one line. Print their greatest common divisor.",
            lambda r: f"{r.randint(1, 500) * 6} {r.randint(1, 500) * 4}",
            lambda s: str(math.gcd(*map(int, s.split())))),
    Problem("palindrome", "The input is one word. Print YES if it reads the same backwards, otherwise NO.",
            lambda r: (lambda w: w + w[::-1] if r.random() < 0.5 else w)(_word(r, r.randint(2, 5))),
            lambda s: "YES" if s.strip() == s.strip()[::-1] else "NO"),
    Problem("fibonacci", "The input is an integer n (1 <= n <= 60). Print the n-th Fibonacci number, where F(1) = F(2) = 1.",
            lambda r: str(r.randint(1, 60)), lambda s: str(_fib(int(s)))),
    Problem("count_even", "The input is one line of integers separated by spaces. Print how many are even.",
            lambda r: _ints(r, r.randint(2, 10)), lambda s: str(sum(int(x) % 2 == 0 for x in s.split()))),
)  # fmt: skip


def _fib(n: int) -> int:
    a, b = 1, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return a


def make_row(
    problem: Problem, rng: random.Random, split: str, index: int, n_tests: int = 4
) -> dict[str, Any]:
    example = problem.make_input(rng)
    inputs: list[str] = []
    for _ in range(50):  # distinct from the shown example, so echoing it cannot pass
        if len(inputs) == n_tests:
            break
        candidate = problem.make_input(rng)
        if candidate != example and candidate not in inputs:
            inputs.append(candidate)
    statement = PROMPT.format(
        statement=problem.statement, example_in=example, example_out=problem.solve(example)
    )
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": statement}],
        "ability": "code",
        "reward_model": {
            "style": "rule",
            "ground_truth": {
                "inputs": [i + "\n" for i in inputs],
                "outputs": [problem.solve(i) + "\n" for i in inputs],
            },
        },
        "extra_info": {"split": split, "index": index, "problem": problem.name},
    }


def rows(split: str, seed: int, n_train: int = N_TRAIN) -> list[dict[str, Any]]:
    """`train`: the problems in turn, from `seed`; `val`: each problem twice, from `10_000 + seed`,
    indexed after the training rows."""
    if split == "train":
        rng = random.Random(seed)
        return [make_row(PROBLEMS[i % len(PROBLEMS)], rng, "train", i) for i in range(n_train)]
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    val_rng = random.Random(10_000 + seed)
    return [make_row(p, val_rng, "test", n_train + i) for i, p in enumerate(PROBLEMS * 2)]
