"""Code-agent task (Code-R1 style): small stdin/stdout programming problems with hidden tests.

The model may run code while it works (`<code>...</code>` -> `<observation>...</observation>`) and
gives its final program in a ```python block inside `<answer>`; the scorer runs that program on
every hidden test in the sandbox, the one the `python` tool uses when the run binds it.

**Problems and the held-out split.** 32 problems in 7 families (`problems.py`). Training rows come
from 19 problems of 5 families: `lists` (sum, max, min, sum of squares of a list), `strings`
(reverse, upper-case, double the letters, rotate a word), `number_theory` (gcd, digit sum, divisor
count, reversed digits), `sequences` (factorial, Fibonacci, triangular numbers, powers of two) and
`counting` (even, vowels, distinct values). Validation asks two things apart, by `data_source`:
- `turnrl/code/new_problem`: one held-out problem of each training family (`HELD_OUT_PROBLEMS`:
  the range of a list, a word's letters sorted, lcm, 1*1 + ... + n*n, count the positive numbers),
  new problems close to ones training shows;
- `turnrl/code/new_family`: 8 problems of 2 families no training row shows: `list_transform`
  (sort, reverse, double, absolute values of a list: print a list) and `words` (word count,
  longest word, acronym, reversed word order of a line of words): does the skill transfer (read the
  input, transform it, print)?
No validation problem is ever trained on, so neither measures memorised problems. `extra_info`
names each row's `problem` and `family`.

**Tests.** Each row shows one example (input and output) and holds `N_TESTS` = 10 hidden tests on
other inputs whose expected outputs are all different, and different from the example's: no
constant output passes more than one test in ten, and printing the example's output passes none.
No problem has a yes/no answer.

**Reward** (`compute_score`): `score = RAN_CREDIT * ran + (1 - RAN_CREDIT) * pass_rate`, where
`pass_rate` is the fraction of tests whose output is the expected one and `ran` is 1 when the
program exited 0 (no exception, no time-out) on at least one test. A program that runs but is
wrong on every test earns 0.1, which tells "runs" apart from "crashes" early in training; every
test passed earns 1.0. `acc` (= `pass_rate`) and `formatted` (a program could be extracted) are
reported beside it.

**Prompt.** With `example=True` (the default) the instructions end with one complete exchange for
another problem (a `<code>` test run, its `<observation>`, the final answer), so an untrained model
sees the protocol once. `rows(split, seed, **args)` takes `example` and `n_train`; any other key is
an error naming the valid ones.
"""

from turnrl.tasks.code.demos import build as demonstrations
from turnrl.tasks.code.demos import demo_problems
from turnrl.tasks.code.problems import (
    HELD_OUT_PROBLEMS,
    PROBLEMS,
    TRAIN_PROBLEMS,
    VAL_PROBLEMS,
    Problem,
)
from turnrl.tasks.code.task import (
    DATA_SOURCE,
    DATA_SOURCES,
    N_TESTS,
    N_TRAIN,
    RAN_CREDIT,
    TASK_ARGS,
    VAL_ROWS_PER_PROBLEM,
    VAL_SOURCES,
    compute_score,
    draw_tests,
    make_row,
    prompt,
    rows,
    score,
)

__all__ = [
    "DATA_SOURCE",
    "DATA_SOURCES",
    "HELD_OUT_PROBLEMS",
    "N_TESTS",
    "N_TRAIN",
    "PROBLEMS",
    "RAN_CREDIT",
    "TASK_ARGS",
    "TRAIN_PROBLEMS",
    "VAL_PROBLEMS",
    "VAL_ROWS_PER_PROBLEM",
    "VAL_SOURCES",
    "Problem",
    "compute_score",
    "demo_problems",
    "demonstrations",
    "draw_tests",
    "make_row",
    "prompt",
    "rows",
    "score",
]  # fmt: skip
