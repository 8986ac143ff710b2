"""MATH (hendrycks / lighteval: `problem`, `solution`, `level`, `type`) as verl's
`examples/data_preprocess/math_dataset.py` writes it."""

from __future__ import annotations

from typing import Any

from turnrl.data.prepare.rows import SkipRow, text_field, verl_row

# verl writes the first since the second disappeared from the hub; older verl files carry the second
SOURCES = ("DigitalLearningGmbH/MATH-lighteval", "lighteval/MATH")
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def boxed_answer(solution: str) -> str:
    """The content of the last `\\boxed{...}` (braces matched), or what follows `\\boxed ` up to
    the next `$` when the solution uses that brace-less form, which verl's extractor checks first."""
    if "\\boxed " in solution:
        answer = solution.split("\\boxed ")[-1].split("$")[0]
    else:
        answer = _last_braced(solution)
    if not answer.strip():
        raise SkipRow("solution's \\boxed{} is empty")
    return answer


def _last_braced(solution: str) -> str:
    start = solution.rfind("\\boxed")
    if start < 0:
        raise SkipRow("solution has no \\boxed{}")
    if not solution.startswith("\\boxed{", start):
        raise SkipRow("solution's last \\boxed is not followed by '{'")
    depth = 0
    for i in range(start + len("\\boxed"), len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[i], 0)
        if depth == 0:
            return solution[start + len("\\boxed{") : i]
    raise SkipRow("solution's last \\boxed{ is never closed")


def to_row(example: dict[str, Any], split: str, index: int, data_source: str) -> dict[str, Any]:
    problem, solution = text_field(example, "problem"), text_field(example, "solution")
    return verl_row(
        example,
        ("problem", "solution"),  # level and type stay as columns, as in verl's files
        data_source=data_source,
        prompt=f"{problem} {INSTRUCTION}",
        ability="math",
        ground_truth=boxed_answer(solution),
        extra_info={"split": split, "index": index},
    )
