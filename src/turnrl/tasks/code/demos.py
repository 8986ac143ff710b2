"""Scripted code-agent episodes for a supervised cold start (`turnrl data code_sft` writes them).

Each row is one of the code task's training rows (`rows("train", seed)`, the very prompt RL samples
from) plus an `episode` in the XML protocol (docs/sft.md), model turns and observations in order:

    assistant    <code>\\nimport io, sys\\nsys.stdin = io.StringIO('3 5 -2\\\\n')\\nnums = ...\\nprint(sum(nums))\\n</code>
    observation  tag "observation": 6
    assistant    <answer>\\n```python\\nnums = ...\\nprint(sum(nums))\\n```\\n</answer>

The first turn tests the problem's reference program on the row's example input (standard input
replaced in the program, since the python tool passes none); the observation is that program really
run in a Python subprocess and rendered by the python tool's own `render_run`, so it is what the
tool would show. A demonstration is kept only when the run printed the example's expected output.
Only training rows are used: their problems' families never appear in validation.

A *repair* demonstration (`retry_fraction` of them) first tests the program of another problem of the
same family, the mistake a small model makes on a problem it was never shown (gcd's program for an
lcm question), reads an output that is not the example's, says so, and then tests and answers with
the right program:

    assistant    <code>... the sibling's program ...</code>
    observation  2
    assistant    That is not 36, so this program solves another problem.\n<code>... the right one ...</code>
    observation  36
    assistant    <answer>...</answer>

The sibling is a demonstrated problem (with `problems`, one of those named), so no program of a
problem left for RL to discover appears in a demonstration, not even as the wrong one.
"""

from __future__ import annotations

import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turnrl.tasks.code.problems import PROBLEMS, TRAIN_PROBLEMS
from turnrl.tasks.code.task import N_TRAIN, rows

if TYPE_CHECKING:
    from turnrl.servers.sandbox.client import RunResult

BY_NAME = {p.name: p for p in PROBLEMS}
MAX_DEMOS = 5_000
"""The most demonstrations (`turnrl data code_sft --n`; the default is `N_TRAIN`): each runs its program
in a subprocess (about 30 ms), so this many take a few minutes; and the training rows drawn for a
single chosen problem (`problems`), 5,000 rounds of the 19 training problems, stay within the task's
`args.MAX_ROWS`."""
RUN_TIMEOUT = 10.0
WORKERS = 4
OBS_TAG = "observation"  # the code_agent recipe's rollout.multi_turn.python.obs_tag


class DemoRunError(RuntimeError):
    """A reference program that failed on its own example: a bug in `problems.py`."""


@dataclass
class Report:
    used: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    """Demonstrations per problem."""
    repairs: int = 0
    """Demonstrations that first test another problem's program (`retry_fraction`)."""


def probe_program(solution: str, example_input: str) -> str:
    """The reference program with standard input replaced by the example's: what the model runs."""
    return f"import io, sys\nsys.stdin = io.StringIO({example_input + chr(10)!r})\n{solution}"


def run_python(program: str) -> RunResult:
    """`program` in a fresh Python subprocess, as a `RunResult` the python tool can render."""
    from turnrl.servers.sandbox.client import RunResult  # httpx: only when demonstrations are made

    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=RUN_TIMEOUT
        )
    except subprocess.TimeoutExpired as err:
        return RunResult("Failed", "TimeLimitExceeded", stdout=str(err.stdout or ""))
    status = "Success" if done.returncode == 0 else "Failed"
    return RunResult(status, "Finished", done.stdout, done.stderr, done.returncode)


def episode(solution: str, example_input: str, expected: str) -> list[dict[str, str]]:
    """Test on the example, read the output, answer with the program."""
    from turnrl.agent.tools.python import render_run  # the tool's own rendering of a run

    probe = probe_program(solution, example_input)
    result = run_python(probe)
    if not result.ok or result.stdout.strip() != expected.strip():
        raise DemoRunError(
            f"reference program printed {render_run(result)!r} on its example, not {expected!r}"
        )
    return [
        {"role": "assistant", "content": f"<code>\n{probe}</code>"},
        {"role": "observation", "tag": OBS_TAG, "content": render_run(result)},
        {"role": "assistant", "content": f"<answer>\n```python\n{solution}```\n</answer>"},
    ]


def repair(wrong: str, solution: str, example_input: str, expected: str) -> list[dict[str, str]] | None:
    """Test `wrong` (another problem's program) first, see that its output is not `expected`, then
    the episode of the right `solution`; None when `wrong` happens to print `expected` on this input
    (there is no mistake to show)."""
    from turnrl.agent.tools.python import render_run

    probe = probe_program(wrong, example_input)
    result = run_python(probe)
    if result.ok and result.stdout.strip() == expected.strip():
        return None
    right = episode(solution, example_input, expected)
    # the fewest words that tie the output to the example's: the response budget is a few hundred tokens
    noticed = f"That is not {expected.strip()}, so this program solves another problem.\n"
    return [
        {"role": "assistant", "content": f"<code>\n{probe}</code>"},
        {"role": "observation", "tag": OBS_TAG, "content": render_run(result)},
        {"role": "assistant", "content": noticed + right[0]["content"]},
        *right[1:],
    ]


def sibling(problem: str, allowed: tuple[str, ...], rng: random.Random) -> str | None:
    """Another problem of `problem`'s family among `allowed` (training problems), drawn by `rng`."""
    family = BY_NAME[problem].family
    others = [p for p in allowed if p != problem and BY_NAME[p].family == family]
    return rng.choice(others) if others else None


def demo_problems(names: str | None) -> tuple[str, ...] | None:
    """The training problems a comma-separated `names` picks (None: every one), refusing a name that
    is not a training problem (a held-out one would break the split's disjointness)."""
    if names is None:
        return None
    picked = tuple(dict.fromkeys(x.strip() for x in names.split(",") if x.strip()))
    train = [p.name for p in TRAIN_PROBLEMS]
    bad = [x for x in picked if x not in train]
    if not bad and picked:
        return picked
    if not bad:
        why = "no problem named"
    elif bad[0] in BY_NAME:
        why = f"'{bad[0]}' is a validation problem, never demonstrated"
    else:
        why = f"'{bad[0]}' is not a training problem"
    raise ValueError(f"{why}; training problems: {', '.join(train)}")


def build(
    n: int | None,
    seed: int,
    problems: tuple[str, ...] | None = None,
    retry_fraction: float = 0.0,
    **args: Any,
) -> tuple[list[dict[str, Any]], Report]:
    """Demonstrations for the first `n` training rows of `seed` (all `N_TRAIN` when None); `args`
    are the task's (`example`, ...), so the prompts are the RL run's. With `problems`, the first `n`
    training rows of those problems: the same rows, at the same indices, as the RL run's prefix.
    `retry_fraction` of them (drawn with `seed`) are repair demonstrations (module docstring)."""
    count = n if n is not None else int(args.pop("n_train", N_TRAIN))
    args.pop("n_train", None)
    if problems is None:
        train = rows("train", seed, n_train=count, **args)
    else:  # training rows take the problems in turn: enough rounds to hold `count` of the chosen ones
        rounds = -(-count // len(problems))
        every = rows("train", seed, n_train=rounds * len(TRAIN_PROBLEMS), **args)
        train = [r for r in every if r["extra_info"]["problem"] in problems][:count]
    picked = [BY_NAME[row["extra_info"]["problem"]] for row in train]
    shown = [row["extra_info"]["example_input"] for row in train]
    rng = random.Random(seed)
    repaired = set(rng.sample(range(len(train)), round(retry_fraction * len(train))))
    allowed = problems or tuple(p.name for p in TRAIN_PROBLEMS)
    wrong = [sibling(p.name, allowed, rng) if i in repaired else None for i, p in enumerate(picked)]

    def make(p: Any, x: str, other: str | None) -> tuple[list[dict[str, str]], bool]:
        expected = p.solve(x)
        fixed = repair(BY_NAME[other].solution, p.solution, x, expected) if other else None
        return (fixed, True) if fixed else (episode(p.solution, x, expected), False)

    # each run is a subprocess that mostly waits to start: a few at once, results kept in row order
    with ThreadPoolExecutor(WORKERS) as pool:
        episodes = list(pool.map(make, picked, shown, wrong))
    report = Report(used=len(train))
    for row, problem, (steps, is_repair) in zip(train, picked, episodes, strict=True):
        row["episode"] = steps
        report.problems[problem.name] = report.problems.get(problem.name, 0) + 1
        report.repairs += is_repair
    return train, report
