"""The code task's problems: a statement, an input generator, the expected output, and a scripted
reference program (the source text `turnrl data code_sft` shows the model).

`solve` and `solution` state the same thing twice on purpose: `solve` gives the rows' expected
outputs in-process (rows stay a cheap pure function), and `solution` is the program a demonstration
runs; tests/integration/test_code_task.py runs every `solution` on its problem's tests in the real
sandbox, so the two cannot drift apart.

Families group problems by the skill they train. Training families: `lists`, `strings`,
`number_theory`, `sequences`, `counting`. Held-out families, validation only: `list_transform`
(read a list of integers, print a list) and `words` (read a line of words). Both reuse skills the
training families teach (reading integers or text, a one-line transformation, printing) in
combinations training never shows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

TRAIN_FAMILIES = ("lists", "strings", "number_theory", "sequences", "counting")
VAL_FAMILIES = ("list_transform", "words")


@dataclass(frozen=True)
class Problem:
    name: str
    family: str
    statement: str
    make_input: Callable[[random.Random], str]
    """One test's standard input, without the final newline."""
    solve: Callable[[str], str]
    """The expected standard output for an input, without the final newline."""
    solution: str
    """A reference program, as the demonstrations show it (ends with a newline)."""


LETTERS = "abcdefghiklmnoprstuvwy"


def _ints(rng: random.Random, lo: int = 1, hi: int = 12, low: int = -50, high: int = 99) -> str:
    """A line of `lo`..`hi` integers in [low, high]."""
    return " ".join(str(rng.randint(low, high)) for _ in range(rng.randint(lo, hi)))


def _word(rng: random.Random, lo: int = 3, hi: int = 10, letters: str = LETTERS) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(lo, hi)))


def _words(rng: random.Random, lo: int = 2, hi: int = 9) -> str:
    return " ".join(_word(rng, 2, 8) for _ in range(rng.randint(lo, hi)))


def _nums(s: str) -> list[int]:
    return [int(x) for x in s.split()]


def _divisors(n: int) -> int:
    return sum(n % d == 0 for d in range(1, n + 1))


def _fib(n: int) -> int:
    a, b = 1, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return a


READ_INTS = "nums = list(map(int, input().split()))\n"
READ_WORD = "s = input().strip()\n"
READ_N = "n = int(input())\n"
LIST_LINE = "The input is one line of integers separated by spaces."
WORD_LINE = "The input is one word of lowercase letters."
WORDS_LINE = "The input is one line of lowercase words separated by single spaces."

PROBLEMS: tuple[Problem, ...] = (
    # lists: a list of integers in, one number out
    Problem("list_sum", "lists", f"{LIST_LINE} Print their sum.",
            _ints, lambda s: str(sum(_nums(s))),
            READ_INTS + "print(sum(nums))\n"),
    Problem("list_max", "lists", f"{LIST_LINE} Print the largest of them.",
            _ints, lambda s: str(max(_nums(s))),
            READ_INTS + "print(max(nums))\n"),
    Problem("list_min", "lists", f"{LIST_LINE} Print the smallest of them.",
            _ints, lambda s: str(min(_nums(s))),
            READ_INTS + "print(min(nums))\n"),
    Problem("list_range", "lists", f"{LIST_LINE} Print the largest minus the smallest.",
            _ints, lambda s: str(max(_nums(s)) - min(_nums(s))),
            READ_INTS + "print(max(nums) - min(nums))\n"),
    Problem("list_sum_squares", "lists", f"{LIST_LINE} Print the sum of their squares.",
            _ints, lambda s: str(sum(x * x for x in _nums(s))),
            READ_INTS + "print(sum(x * x for x in nums))\n"),
    # strings: a word in, a word out
    Problem("reverse", "strings", f"{WORD_LINE} Print it reversed.",
            _word, lambda s: s[::-1],
            READ_WORD + "print(s[::-1])\n"),
    Problem("upper", "strings", f"{WORD_LINE} Print it in capital letters.",
            _word, lambda s: s.upper(),
            READ_WORD + "print(s.upper())\n"),
    Problem("double_letters", "strings", f"{WORD_LINE} Print it with every letter written twice (abc becomes aabbcc).",
            _word, lambda s: "".join(c * 2 for c in s),
            READ_WORD + 'print("".join(c * 2 for c in s))\n'),
    Problem("rotate", "strings", f"{WORD_LINE} Move its first letter to the end and print the result.",
            _word, lambda s: s[1:] + s[0],
            READ_WORD + "print(s[1:] + s[0])\n"),
    Problem("sort_letters", "strings", f"{WORD_LINE} Print its letters in alphabetical order.",
            _word, lambda s: "".join(sorted(s)),
            READ_WORD + 'print("".join(sorted(s)))\n'),
    # number_theory: one or two integers in, one number out
    Problem("gcd", "number_theory", "The input is two positive integers on one line. Print their greatest common divisor.",
            lambda r: f"{r.randint(1, 60) * r.randint(1, 12)} {r.randint(1, 60) * r.randint(1, 12)}",
            lambda s: str(math.gcd(*_nums(s))),
            "import math\n\na, b = map(int, input().split())\nprint(math.gcd(a, b))\n"),
    Problem("lcm", "number_theory", "The input is two positive integers on one line. Print their least common multiple.",
            lambda r: f"{r.randint(1, 40)} {r.randint(1, 40)}",
            lambda s: str(math.lcm(*_nums(s))),
            "import math\n\na, b = map(int, input().split())\nprint(a * b // math.gcd(a, b))\n"),
    Problem("digit_sum", "number_theory", "The input is a non-negative integer. Print the sum of its decimal digits.",
            lambda r: str(r.randint(0, 10 ** r.randint(1, 12))),
            lambda s: str(sum(int(c) for c in s)),
            "s = input().strip()\nprint(sum(int(c) for c in s))\n"),
    Problem("divisor_count", "number_theory", "The input is a positive integer n (n <= 5000). Print how many positive integers divide n.",
            lambda r: str(r.randint(1, 5000)), lambda s: str(_divisors(int(s))),
            READ_N + "print(sum(1 for d in range(1, n + 1) if n % d == 0))\n"),
    Problem("digit_reverse", "number_theory", "The input is a positive integer. Print the number its digits make in reverse order, without leading zeros (1200 gives 21).",
            lambda r: str(r.randint(1, 10 ** r.randint(1, 9))), lambda s: str(int(s[::-1])),
            "s = input().strip()\nprint(int(s[::-1]))\n"),
    # sequences: n in, the n-th term out
    Problem("factorial", "sequences", "The input is an integer n (0 <= n <= 20). Print n! (n factorial).",
            lambda r: str(r.randint(0, 20)), lambda s: str(math.factorial(int(s))),
            READ_N + "result = 1\nfor i in range(2, n + 1):\n    result *= i\nprint(result)\n"),
    Problem("fibonacci", "sequences", "The input is an integer n (1 <= n <= 60). Print the n-th Fibonacci number, where F(1) = F(2) = 1.",
            lambda r: str(r.randint(1, 60)), lambda s: str(_fib(int(s))),
            READ_N + "a, b = 1, 1\nfor _ in range(n - 1):\n    a, b = b, a + b\nprint(a)\n"),
    Problem("triangular", "sequences", "The input is a positive integer n. Print 1 + 2 + ... + n.",
            lambda r: str(r.randint(1, 2000)), lambda s: str(int(s) * (int(s) + 1) // 2),
            READ_N + "print(n * (n + 1) // 2)\n"),
    Problem("power_of_two", "sequences", "The input is an integer n (0 <= n <= 62). Print 2 to the power n.",
            lambda r: str(r.randint(0, 62)), lambda s: str(2 ** int(s)),
            READ_N + "print(2 ** n)\n"),
    Problem("sum_of_squares", "sequences", "The input is a positive integer n. Print 1*1 + 2*2 + ... + n*n.",
            lambda r: str(r.randint(1, 500)), lambda s: str(sum(i * i for i in range(1, int(s) + 1))),
            READ_N + "print(sum(i * i for i in range(1, n + 1)))\n"),
    # counting: a list or a word in, a count out
    Problem("count_even", "counting", f"{LIST_LINE} Print how many of them are even.",
            lambda r: _ints(r, 1, 30), lambda s: str(sum(x % 2 == 0 for x in _nums(s))),
            READ_INTS + "print(sum(1 for x in nums if x % 2 == 0))\n"),
    Problem("count_positive", "counting", f"{LIST_LINE} Print how many of them are greater than zero.",
            lambda r: _ints(r, 1, 30), lambda s: str(sum(x > 0 for x in _nums(s))),
            READ_INTS + "print(sum(1 for x in nums if x > 0))\n"),
    Problem("count_vowels", "counting", f"{WORD_LINE} Print how many of its letters are vowels (a, e, i, o, u).",
            lambda r: _word(r, 3, 40), lambda s: str(sum(c in "aeiou" for c in s)),
            READ_WORD + 'print(sum(1 for c in s if c in "aeiou"))\n'),
    Problem("count_distinct", "counting", f"{LIST_LINE} Print how many different numbers there are among them.",
            lambda r: _ints(r, 1, 30, 1, 20), lambda s: str(len(set(_nums(s)))),
            READ_INTS + "print(len(set(nums)))\n"),
    # list_transform (held out): a list of integers in, a list out
    Problem("sort_list", "list_transform", f"{LIST_LINE} Print them in increasing order, separated by spaces.",
            lambda r: _ints(r, 2), lambda s: " ".join(map(str, sorted(_nums(s)))),
            READ_INTS + "print(*sorted(nums))\n"),
    Problem("reverse_list", "list_transform", f"{LIST_LINE} Print them in reverse order, separated by spaces.",
            lambda r: _ints(r, 2), lambda s: " ".join(reversed(s.split())),
            READ_INTS + "print(*nums[::-1])\n"),
    Problem("double_list", "list_transform", f"{LIST_LINE} Print each of them times two, in the same order, separated by spaces.",
            _ints, lambda s: " ".join(str(2 * x) for x in _nums(s)),
            READ_INTS + "print(*[2 * x for x in nums])\n"),
    Problem("abs_list", "list_transform", f"{LIST_LINE} Print the absolute value of each of them, in the same order, separated by spaces.",
            _ints, lambda s: " ".join(str(abs(x)) for x in _nums(s)),
            READ_INTS + "print(*[abs(x) for x in nums])\n"),
    # words (held out): a line of words in
    Problem("word_count", "words", f"{WORDS_LINE} Print how many words it has.",
            lambda r: _words(r, 1, 16), lambda s: str(len(s.split())),
            "words = input().split()\nprint(len(words))\n"),
    Problem("longest_word", "words", f"{WORDS_LINE} Print its longest word (the first of them if several are equally long).",
            _words, lambda s: max(s.split(), key=len),
            "words = input().split()\nprint(max(words, key=len))\n"),
    Problem("acronym", "words", f"{WORDS_LINE} Print the first letters of its words, joined together, in capital letters.",
            _words, lambda s: "".join(w[0] for w in s.split()).upper(),
            'words = input().split()\nprint("".join(w[0] for w in words).upper())\n'),
    Problem("reverse_words", "words", f"{WORDS_LINE} Print its words in reverse order, separated by spaces.",
            _words, lambda s: " ".join(s.split()[::-1]),
            "words = input().split()\nprint(*words[::-1])\n"),
)  # fmt: skip

HELD_OUT_PROBLEMS = ("list_range", "sort_letters", "lcm", "sum_of_squares", "count_positive")
"""One problem of each training family that no training row or demonstration shows: validation on
new problems of known families (`turnrl/code/new_problem`), beside the new families."""

TRAIN_PROBLEMS = tuple(p for p in PROBLEMS if p.family in TRAIN_FAMILIES and p.name not in HELD_OUT_PROBLEMS)
NEW_PROBLEMS = tuple(p for p in PROBLEMS if p.name in HELD_OUT_PROBLEMS)
"""Validation, `turnrl/code/new_problem`: held-out problems of the training families."""
NEW_FAMILY_PROBLEMS = tuple(p for p in PROBLEMS if p.family in VAL_FAMILIES)
"""Validation, `turnrl/code/new_family`: every problem of the held-out families."""
VAL_PROBLEMS = NEW_PROBLEMS + NEW_FAMILY_PROBLEMS
