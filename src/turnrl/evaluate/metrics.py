"""The numbers `turnrl eval` reports, as pure functions of per-response scores.

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained
on Code", eq. 1): with n responses to a prompt of which c succeed, the chance that k drawn without
replacement hold at least one success is 1 - C(n-c, k) / C(n, k), averaged over prompts. Drawing
k out of n (instead of sampling only k) gives the same expectation with a lower variance.
"""

from __future__ import annotations

from math import comb

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that k of the n responses, drawn without replacement,
    include at least one of the c successes. Exact integer binomials, one division."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    # C(n-c, k) is 0 when fewer than k failures exist: every draw of k holds a success
    return 1.0 - comb(n - c, k) / comb(n, k)


def ks_for(n: int) -> list[int]:
    """The k reported for n responses per prompt: 1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if n >= 1 and ks[-1] != n:
        ks.append(n)
    return ks


def sampled_metrics(groups: list[list[float]], threshold: float) -> dict[str, float]:
    """`mean@n` (the mean score of every response) and `pass@k` for k in `ks_for(n)`, over prompts
    whose n responses scored `groups[i]`; a response succeeds when its score >= `threshold`."""
    n = len(groups[0])
    if any(len(g) != n for g in groups):
        raise ValueError("every prompt needs the same number of responses")
    out = {f"mean@{n}": float(np.mean([s for g in groups for s in g]))}
    successes = [sum(s >= threshold for s in g) for g in groups]
    for k in ks_for(n):
        out[f"pass@{k}"] = float(np.mean([pass_at_k(n, c, k) for c in successes]))
    return out


def greedy_metrics(scores: list[float]) -> dict[str, float]:
    """`greedy_score`: the mean score of one greedy response per prompt, computed as training's
    validation computes `val/test_score/*` (so equal weights and prompts give the same float)."""
    return {"greedy_score": float(np.mean(scores))}


def format_table(overall: dict[str, float | int], per_source: dict[str, dict[str, float | int]]) -> str:
    """A fixed-width table: one row per data source, then `overall`; the columns are the metrics."""
    columns = list(overall)
    rows = [*per_source.items(), ("overall", overall)]
    width = max(len("data_source"), *(len(name) for name, _ in rows))
    head = f"{'data_source':<{width}}" + "".join(f"{c:>14}" for c in columns)
    lines = [head, "-" * len(head)]
    for name, values in rows:
        cells = "".join(f"{_cell(values.get(c)):>14}" for c in columns)
        lines.append(f"{name:<{width}}{cells}")
    return "\n".join(lines)


def _cell(value: float | int | None) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4f}"  # counts are ints, scores floats
