"""`turnrl eval`'s numbers: pass@k against hand-worked binomials and against brute-force enumeration."""

import itertools
from fractions import Fraction

import pytest

from turnrl.evaluate.metrics import format_table, greedy_metrics, ks_for, pass_at_k, sampled_metrics


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 1, 0.3),  # k=1: 1 - C(7,1)/C(10,1) = c/n
        (8, 2, 4, 55 / 70),  # 1 - C(6,4)/C(8,4) = 1 - 15/70
        (4, 3, 2, 1.0),  # C(1,2) = 0: only one failure, every pair holds a success
        (4, 0, 4, 0.0),  # no success, none to draw
        (4, 4, 1, 1.0),
    ],
)
def test_pass_at_k_hand_worked(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_share_of_k_subsets_holding_a_success():
    # by definition: draw k of the n responses without replacement; does the draw hold a success?
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(outcomes, k))
                brute = Fraction(sum(any(d) for d in draws), len(draws))
                assert pass_at_k(n, c, k) == pytest.approx(float(brute), abs=1e-12), (n, c, k)


def test_pass_at_k_rejects_impossible_counts():
    for n, c, k in [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_ks_are_powers_of_two_then_n():
    assert ks_for(0) == []
    assert ks_for(1) == [1]
    assert ks_for(2) == [1, 2]
    assert ks_for(5) == [1, 2, 4, 5]
    assert ks_for(8) == [1, 2, 4, 8]


def test_sampled_metrics_hand_worked():
    # prompt A: 1 of 4 solved, prompt B: 2 of 4
    # mean@4 = 3/8 = 0.375; pass@1 = (1/4 + 2/4)/2 = 0.375
    # pass@2 = (1 - C(3,2)/C(4,2) + 1 - C(2,2)/C(4,2))/2 = (0.5 + 5/6)/2 = 2/3; pass@4 = (1 + 1)/2 = 1
    got = sampled_metrics([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]], threshold=1.0)
    assert got == pytest.approx({"mean@4": 0.375, "pass@1": 0.375, "pass@2": 2 / 3, "pass@4": 1.0})
    assert list(got) == ["mean@4", "pass@1", "pass@2", "pass@4"]


def test_threshold_decides_what_a_success_is():
    # partial credit: 0.5 passes a 0.5 threshold, not a 1.0 one; the mean score is the same either way
    groups = [[0.5, 0.0]]
    assert sampled_metrics(groups, threshold=0.5) == pytest.approx(
        {"mean@2": 0.25, "pass@1": 0.5, "pass@2": 1.0}
    )
    assert sampled_metrics(groups, threshold=1.0) == pytest.approx(
        {"mean@2": 0.25, "pass@1": 0.0, "pass@2": 0.0}
    )
    with pytest.raises(ValueError):
        sampled_metrics([[1.0, 0.0], [1.0]], threshold=1.0)


def test_greedy_is_the_mean_score():
    assert greedy_metrics([1.0, 0.0, 0.5, 0.5]) == {"greedy_score": 0.5}


def test_table_lists_sources_then_overall():
    overall = {"prompts": 3, "greedy_score": 0.5, "pass@1": 0.25}
    table = format_table(overall, {"a/b": {"prompts": 2, "greedy_score": 0.75, "pass@1": 0.125}})
    lines = table.splitlines()
    assert lines[0].split() == ["data_source", "prompts", "greedy_score", "pass@1"]
    assert lines[2].split() == ["a/b", "2", "0.7500", "0.1250"]
    assert lines[3].split() == ["overall", "3", "0.5000", "0.2500"]
