"""Shortcut baselines: what a policy that learned no skill scores on the same validation rows.

A learning claim counts only above the best of these. Each shortcut writes an answer per row in the
task's own format (`<answer>X</answer>`) and is scored by the task's own scorer, so a shortcut is
held to exactly what the model is held to:

    best constant     the one answer that is right most often on these rows (chosen on the rows
                      themselves: an upper bound for any constant a policy could settle on)
    always add        an arithmetic expression with every `-` read as `+` (a policy that never
                      learned subtraction)
    drop the sign     the right answer without its minus sign
    never negative    the right answer where it is >= 0, else the best non-negative constant: the
                      ceiling of a policy that never writes a minus sign
    parity (gcd)      2 when every number in the question is even, else 1: the greatest common
                      divisor's two most common values, told apart by the last digits
    by gender         (family_relationships) the answer most often right for the gender of the
                      person asked about, read from the dataset's name lists ("son" for a man's
                      name, "wife" for a woman's): chosen on the rows, like the constant

A rule that does not apply to a row (no expression in the question) answers nothing there.
`benchmarks/shortcuts.py` prints them for a task's validation split.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from turnrl.rewards.registry import split_score

Row = dict[str, Any]
Rule = Callable[[Row], str | None]

EXPRESSION = re.compile(r"(-?\d+(?:\s*[-+]\s*\d+)+)\s*=?\s*$")


def question(row: Row) -> str:
    """The text the model is asked: the last user message of the row's prompt."""
    return next(m["content"] for m in reversed(row["prompt"]) if m["role"] == "user")


def truth(row: Row) -> str:
    """The row's answer as a model would write it: a search row's ground truth is
    `{"target": [name, alias, ...]}`, and its first name is the answer (the scorer takes any alias)."""
    answer = row["reward_model"]["ground_truth"]
    if isinstance(answer, dict) and "target" in answer:
        answer = answer["target"]
    if isinstance(answer, list) and answer:
        answer = answer[0]
    return str(answer).strip()


def always_add(row: Row) -> str | None:
    """`7 - 3 + 2 =` answered as 7 + 3 + 2 = 12."""
    found = EXPRESSION.search(question(row).strip())
    if found is None:
        return None
    return str(sum(abs(int(n)) for n in re.findall(r"\d+", found.group(1))))


def drop_the_sign(row: Row) -> str | None:
    return truth(row).lstrip("-")


def best_constant(rows: list[Row]) -> tuple[str, float]:
    """The most common right answer on `rows` and the fraction of rows it answers."""
    counts = Counter(truth(r) for r in rows)
    answer, hits = counts.most_common(1)[0]
    return answer, hits / len(rows)


def never_negative(rows: list[Row]) -> Rule:
    non_negative = [r for r in rows if not truth(r).startswith("-")] or rows
    fallback = best_constant(non_negative)[0]
    return lambda row: truth(row) if not truth(row).startswith("-") else fallback


def gcd_parity(row: Row) -> str | None:
    """`Find the Greatest Common Divisor (GCD) of these numbers: 26, 238.` -> 2 (both even)."""
    numbers = [int(n) for n in re.findall(r"\d+", question(row).partition(":")[2])]
    return None if not numbers else "2" if all(n % 2 == 0 for n in numbers) else "1"


FAMILY_QUESTION = re.compile(r"(?:How is|What relation is|What is) (\w+)(?: related)? to \w+\?")
"""family_relationships' three phrasings; group 1 is the person whose relation is asked."""


def gender(row: Row, male: set[str]) -> str | None:
    found = FAMILY_QUESTION.search(question(row))
    return None if found is None else "male" if found.group(1) in male else "female"


def by_gender(rows: list[Row]) -> tuple[str, Rule]:
    """The rule's name and the rule: per gender of the person asked about, the most common right
    answer on `rows` (an upper bound for any policy that reads only that person's gender)."""
    from reasoning_gym.graphs.family_relationships import FamilyRelationshipsConfig  # the rows imply it

    male = set(FamilyRelationshipsConfig().male_names)
    counts: dict[str, Counter[str]] = {}
    for r in rows:  # each row's gender read once
        sex = gender(r, male)
        if sex is not None:
            counts.setdefault(sex, Counter())[truth(r)] += 1
    best = {sex: c.most_common(1)[0][0] for sex, c in counts.items()}
    name = ", ".join(f"{best[sex]} if {sex}" for sex in sorted(best))
    return f"by gender ({name})", lambda row: best.get(gender(row, male) or "")


def rules_for(rows: list[Row]) -> dict[str, Rule]:
    """The shortcuts that apply to these rows: the constant always; the arithmetic rules where the
    questions end in an expression and some answers are negative (else they equal the truth)."""
    constant = best_constant(rows)[0]
    rules: dict[str, Rule] = {f"best constant ({constant})": lambda row: constant}
    arithmetic = all(EXPRESSION.search(question(r).strip()) for r in rows)
    if arithmetic and any(truth(r).startswith("-") for r in rows):
        rules.update(
            {
                "always add": always_add,
                "drop the sign": drop_the_sign,
                "never negative (ceiling)": never_negative(rows),
            }
        )
    if all(r["data_source"] == "reasoning_gym/gcd" for r in rows):
        rules["parity (2 if all even, else 1)"] = gcd_parity
    if all(r["data_source"] == "reasoning_gym/family_relationships" for r in rows):
        name, rule = by_gender(rows)
        rules[name] = rule
    return rules


def score_rules(
    rows: list[Row], scorer: Callable[..., Any], rules: dict[str, Rule]
) -> dict[str, dict[str, float]]:
    """Per rule, the mean `acc` and `formatted` the task's scorer gives its answers on `rows`."""
    out: dict[str, dict[str, float]] = {}
    for name, rule in rules.items():
        acc = formatted = 0.0
        for row in rows:
            answer = rule(row)
            text = f"<answer>{answer}</answer>" if answer is not None else ""
            score, extra = split_score(
                scorer(row["data_source"], text, row["reward_model"]["ground_truth"], row.get("extra_info")),
                f"shortcut '{name}':",
            )
            acc += extra.get("acc", float(score >= 1.0))
            formatted += extra.get("formatted", float(answer is not None))
        out[name] = {"acc": acc / len(rows), "formatted": formatted / len(rows)}
    return out
