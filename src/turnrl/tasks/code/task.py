"""The code task's rows, prompt and scorer (the package docstring describes the task)."""

from __future__ import annotations

import random
from typing import Any

from turnrl.rewards import code as code_reward
from turnrl.tasks.args import TaskArgError, count_arg, reject_unknown
from turnrl.tasks.code.problems import NEW_FAMILY_PROBLEMS, NEW_PROBLEMS, TRAIN_PROBLEMS, Problem

DATA_SOURCE = "turnrl/code"
"""Training rows; validation rows name what is new in them (`VAL_SOURCES`)."""
VAL_SOURCES = {"new_problem": f"{DATA_SOURCE}/new_problem", "new_family": f"{DATA_SOURCE}/new_family"}
DATA_SOURCES = (DATA_SOURCE, *VAL_SOURCES.values())
N_TRAIN = 512
VAL_ROWS_PER_PROBLEM = 4
N_TESTS = 10
RAN_CREDIT = 0.1
TASK_ARGS = ("example", "n_train")

INSTRUCTIONS = (
    "Solve the programming problem below with a Python program that reads standard input and writes "
    "standard output. You can test code by writing it between <code> and </code>; what it prints comes "
    "back between <observation> and </observation>. Give your final program in a ```python code block "
    "inside <answer> and </answer>.\n\n"
)
WORKED_EXAMPLE = (
    "Here is a complete exchange for another problem.\n"
    "Problem: The input is one integer n. Print n * n.\n"
    "Example input:\n7\nExample output:\n49\n"
    "<code>\nimport io, sys\nsys.stdin = io.StringIO('7\\n')\nn = int(input())\nprint(n * n)\n</code>\n\n"
    "<observation>49</observation>\n\n"
    "<answer>\n```python\nn = int(input())\nprint(n * n)\n```\n</answer>\n\n"
    "Now your problem.\n"
)
PROBLEM = "Problem: {statement}\nExample input:\n{example_in}\nExample output:\n{example_out}\n"


def prompt(problem: Problem, example_in: str, example: bool = True) -> str:
    shown = PROBLEM.format(
        statement=problem.statement, example_in=example_in, example_out=problem.solve(example_in)
    )
    return INSTRUCTIONS + (WORKED_EXAMPLE if example else "") + shown


def _key(output: str) -> tuple[str, ...]:
    """An output as the scorer compares it (`rewards.code.same_output`): lines, trailing spaces off."""
    return tuple(line.rstrip() for line in output.strip().splitlines())


def draw_tests(problem: Problem, rng: random.Random, n_tests: int = N_TESTS) -> tuple[str, list[str]]:
    """(the example input, `n_tests` test inputs): every expected output differs from the others'
    and from the example's, so no constant program passes more than one test."""
    example = problem.make_input(rng)
    seen = {_key(problem.solve(example))}
    inputs: list[str] = []
    for _ in range(100 * n_tests):
        if len(inputs) == n_tests:
            return example, inputs
        candidate = problem.make_input(rng)
        key = _key(problem.solve(candidate))
        if key not in seen:
            seen.add(key)
            inputs.append(candidate)
    raise RuntimeError(
        f"code task: problem '{problem.name}' drew too few distinct outputs for {n_tests} tests"
    )


def make_row(
    problem: Problem,
    rng: random.Random,
    split: str,
    index: int,
    example: bool = True,
    source: str = DATA_SOURCE,
) -> dict[str, Any]:
    shown, inputs = draw_tests(problem, rng)
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": prompt(problem, shown, example)}],
        "ability": "code",
        "reward_model": {
            "style": "rule",
            "ground_truth": {
                "inputs": [i + "\n" for i in inputs],
                "outputs": [problem.solve(i) + "\n" for i in inputs],
            },
        },
        "extra_info": {
            "split": split,
            "index": index,
            "problem": problem.name,
            "family": problem.family,
            "example_input": shown,
        },
    }


def task_args(args: dict[str, Any]) -> tuple[bool, int]:
    """(example, n_train) from `data.task_args`, refusing unknown keys and wrong kinds."""
    reject_unknown(args, TASK_ARGS, "code")
    example = args.get("example", True)
    if not isinstance(example, bool):
        raise TaskArgError(f"task 'code': argument 'example' must be true or false, got {example!r}")
    return example, count_arg(args, "n_train", N_TRAIN, "code")


def rows(split: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """`train`: the training problems in turn, `n_train` rows drawn from `seed` (a smaller `n_train`
    gives a prefix of a larger one's rows); `val`: each held-out problem `VAL_ROWS_PER_PROBLEM`
    times, drawn from `10_000 + seed`, indexed after the training rows: the new problems of the
    training families (`turnrl/code/new_problem`) and the problems of the held-out families
    (`turnrl/code/new_family`), interleaved so any first k >= 13 rows hold every problem once."""
    example, n_train = task_args(args)
    if split == "train":
        rng = random.Random(seed)
        return [
            make_row(TRAIN_PROBLEMS[i % len(TRAIN_PROBLEMS)], rng, "train", i, example)
            for i in range(n_train)
        ]
    if split != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    val_rng = random.Random(10_000 + seed)
    sorts = [(p, VAL_SOURCES["new_problem"]) for p in NEW_PROBLEMS]
    sorts += [(p, VAL_SOURCES["new_family"]) for p in NEW_FAMILY_PROBLEMS]
    held_out = [ps for _ in range(VAL_ROWS_PER_PROBLEM) for ps in sorts]
    return [
        make_row(p, val_rng, "test", n_train + i, example, source) for i, (p, source) in enumerate(held_out)
    ]


def score(runs: list[code_reward.CaseRun]) -> dict[str, float]:
    """The reward of one program's test runs.

    Worked example, 10 tests: the program exits 0 on all of them and prints the right output on 3:
    ran = 1, pass_rate = 0.3, score = 0.1 * 1 + 0.9 * 0.3 = 0.37. Wrong on all 10 but exiting 0:
    0.1. Raising on every test: ran = 0, score = 0. Right on all: 0.1 + 0.9 = 1.0.
    """
    pass_rate = sum(r.passed for r in runs) / len(runs) if runs else 0.0
    ran = float(any(r.ran for r in runs))
    return {
        "score": RAN_CREDIT * ran + (1 - RAN_CREDIT) * pass_rate,
        "acc": pass_rate,
        "formatted": 1.0,
        "pass_rate": pass_rate,
        "ran": ran,
    }


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    sandbox_url: str | None = None,
    sandbox_api_key: str | None = None,
) -> dict[str, float]:
    """verl's signature. The final program (`rewards.code.extract_program`) runs on every stdin/stdout
    test in the sandbox (`sandbox_url` and its key `sandbox_api_key`, bound by the reward table to
    the run's; else the code scorer's default), scored by `score`."""
    if "inputs" not in code_reward.parse_tests(ground_truth):
        raise ValueError("the code task's ground truth holds 'inputs' and 'outputs', not 'assert'")
    runs = code_reward.run_program_tests(
        solution_str, ground_truth, extra_info, sandbox_url=sandbox_url, sandbox_api_key=sandbox_api_key
    )
    if runs is None:
        return {"score": 0.0, "acc": 0.0, "formatted": 0.0, "pass_rate": 0.0, "ran": 0.0}
    return score(runs)
