"""The built-in tools' step rewards (`rollout.multi_turn.step_rewards`): one number per call, from
its outcome, the episode's dataset row and what earlier calls of the episode remembered (`memo`).

    search      1 when the passages name the question's bridge entity (`extra_info.bridge`, two-hop
                questions) or one of its answers (`ground_truth`) that no earlier search of the
                episode found, else 0: evidence gained, after StepSearch (Wang et al. 2025, arXiv
                2505.15107), which rewards each search by the information it adds. Found again, the
                same evidence earns nothing, so repeating a search is not paid.
    calculator  1 for a call that evaluates (a well-formed expression), 0 for an error.
    python      1 for a program that ran and exited 0 within its time limit, else 0.

A tool of one's own rewards its calls itself (`ToolResult.reward`); that value wins over these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

from turnrl.agent.executor import ToolOutcome
from turnrl.rewards.qa import normalize_answer, targets

StepReward = Callable[[ToolOutcome, Mapping[str, Any], dict[str, Any]], float]
"""`(outcome, row, memo) -> reward`: `row` the episode's dataset row (`ground_truth`, `extra_info`,
...), `memo` a dict the episode keeps across its turns."""


def well_formed(outcome: ToolOutcome, row: Mapping[str, Any], memo: dict[str, Any]) -> float:
    """The calculator's: 1 unless the call failed (a malformed expression, a timeout)."""
    return 0.0 if outcome.error else 1.0


def program_ran(outcome: ToolOutcome, row: Mapping[str, Any], memo: dict[str, Any]) -> float:
    """The python tool's: 1 for a program that ran to exit status 0 (the tool's metrics say)."""
    failed = outcome.error or outcome.metrics.get("exit_nonzero") or outcome.metrics.get("timed_out")
    return 0.0 if failed else 1.0


def evidence(row: Mapping[str, Any]) -> list[str]:
    """What a search should find for this row, normalised: the bridge entity, then the answers."""
    info = row.get("extra_info")
    bridge = info.get("bridge") if isinstance(info, Mapping) else None
    wanted = [str(bridge)] if isinstance(bridge, str) and bridge.strip() else []
    truth = row.get("ground_truth")
    # a ground truth of another shape (a code task's tests) holds no answer to find
    with suppress(ValueError):
        wanted += targets(truth) if truth is not None else []
    return [term for term in dict.fromkeys(normalize_answer(w) for w in wanted) if term]


def new_evidence(outcome: ToolOutcome, row: Mapping[str, Any], memo: dict[str, Any]) -> float:
    """The search tool's: 1 when the passages name a term of `evidence` not found before in the
    episode (whole words, after the answer normalisation of exact match), else 0."""
    if outcome.error:
        return 0.0
    text = f" {normalize_answer(outcome.text)} "
    found: set[str] = memo.setdefault("search_evidence", set())
    new = {term for term in evidence(row) if term not in found and f" {term} " in text}
    found |= new
    return 1.0 if new else 0.0
