"""Is a gain more than noise? The paired difference of two conditions on the same questions, with a
95 % bootstrap interval over the questions and, where there are several, over the seeds.

Two conditions (say SFT and SFT then RL) answered the same Q questions; condition B was run with S
seeds, condition A with S seeds paired to B's (seed i of RL starts from seed i of SFT) or once (the
untrained model, whose greedy answers do not depend on a seed). Per seed s and question q the paired
difference is

    D[s, q] = B[s, q] - A[s or 0, q]

and the estimate is its mean over seeds and questions. Its interval comes from the percentile
bootstrap (Efron and Tibshirani 1993, ch. 13), resampling what would change in a rerun: the
questions (the same resampled questions for every seed, since every seed answered the same ones)
and, with S > 1, the seeds, two-level as in a hierarchical bootstrap (Davison and Hinkley 1997,
sec. 3.8). With one seed it is the plain paired bootstrap over questions, which is what
`scipy.stats.bootstrap((D,), np.mean, paired=True, method="percentile")` computes (a test checks
the two agree). A question answered several times per seed (`rollout.val_n`) counts once, at its
mean score.

Pure functions of arrays; reading sample files is `turnrl.evaluate.compare`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A paired difference `new - base` with its bootstrap interval, in score units (x100 = points)."""

    base: float
    """The base condition's mean score over its seeds and the questions."""
    new: float
    diff: float
    """`new - base`: the mean paired difference."""
    low: float
    high: float
    questions: int
    seeds: int

    @property
    def shown(self) -> bool:
        """The whole interval lies above 0: a gain, not noise."""
        return self.low > 0

    def points(self) -> str:
        """`+19.3 (95 % +12.1 to +26.0)` in points."""
        return f"{100 * self.diff:+.1f} (95 % {100 * self.low:+.1f} to {100 * self.high:+.1f})"


def _as_matrix(scores: np.ndarray | list, name: str) -> np.ndarray:
    m = np.asarray(scores, dtype=np.float64)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.shape[1] == 0:
        raise ValueError(f"{name}: expected scores of shape (seeds, questions), got {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError(f"{name}: scores must be finite numbers")
    return m


def differences(base: np.ndarray | list, new: np.ndarray | list) -> np.ndarray:
    """D[s, q] = new[s, q] - base[s, q] (base[0, q] when the base ran once): (seeds, questions)."""
    a, b = _as_matrix(base, "base"), _as_matrix(new, "new")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"base has {a.shape[1]} questions and new {b.shape[1]}: pair them first")
    if a.shape[0] not in (1, b.shape[0]):
        raise ValueError(f"base has {a.shape[0]} seeds and new {b.shape[0]}: give one base or one per seed")
    return b - a


def bootstrap_means(diffs: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` bootstrap replicates of the mean of `diffs` (seeds, questions): the questions
    resampled once per replicate for all seeds, the seeds resampled too when there are several."""
    seeds, questions = diffs.shape
    picks = rng.integers(0, questions, size=(resamples, questions))
    # how often each question was drawn, per replicate: a replicate's per-seed mean is counts @ D[s] / Q
    flat = (picks + questions * np.arange(resamples)[:, None]).ravel()
    counts = np.bincount(flat, minlength=resamples * questions).reshape(resamples, questions)
    per_seed = counts @ diffs.T / questions  # (resamples, seeds)
    if seeds == 1:
        return per_seed[:, 0]
    seed_picks = rng.integers(0, seeds, size=(resamples, seeds))
    return np.take_along_axis(per_seed, seed_picks, axis=1).mean(axis=1)


def paired_interval(
    base: np.ndarray | list,
    new: np.ndarray | list,
    resamples: int = 10_000,
    seed: int = 0,
    level: float = LEVEL,
) -> Interval:
    """The mean paired difference `new - base` and its percentile bootstrap interval (module
    docstring). `base`, `new`: scores of shape (seeds, questions) or (questions,), questions in the
    same order in both."""
    if resamples < 100:
        raise ValueError(f"resamples: at least 100 for a {level:.0%} interval, got {resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level: must be in (0, 1), got {level}")
    diffs = differences(base, new)
    reps = bootstrap_means(diffs, resamples, np.random.default_rng(seed))
    tail = (1 - level) / 2
    low, high = np.quantile(reps, [tail, 1 - tail])
    a, b = _as_matrix(base, "base"), _as_matrix(new, "new")
    return Interval(
        base=float(a.mean()),
        new=float(b.mean()),
        diff=float(diffs.mean()),
        low=float(low),
        high=float(high),
        questions=diffs.shape[1],
        seeds=diffs.shape[0],
    )
