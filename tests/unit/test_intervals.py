"""The paired bootstrap interval (turnrl.evaluate.intervals) and `turnrl compare` on sample files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from turnrl.cli import main
from turnrl.evaluate.intervals import bootstrap_means, differences, paired_interval


def test_a_constant_difference_has_a_point_interval():
    r = paired_interval([0.0, 1.0, 0.5, 0.0], [0.25, 1.25, 0.75, 0.25])
    assert (r.diff, r.low, r.high) == pytest.approx((0.25, 0.25, 0.25))
    assert r.base == pytest.approx(0.375) and r.new == pytest.approx(0.625)
    assert r.shown and r.points() == "+25.0 (95 % +25.0 to +25.0)"


def test_two_questions_worked_by_hand():
    # differences 0 and 1: a resample draws (0,0), (0,1), (1,0) or (1,1), so its mean is 0, 0.5 or
    # 1 with probabilities 1/4, 1/2, 1/4: the 2.5 % and 97.5 % quantiles are 0 and 1
    r = paired_interval([1.0, 0.0], [1.0, 1.0], resamples=4000)
    assert (r.diff, r.low, r.high) == (0.5, 0.0, 1.0)
    assert not r.shown  # the interval touches 0


def test_replicates_follow_the_hand_worked_distribution():
    reps = bootstrap_means(np.array([[0.0, 1.0]]), 20_000, np.random.default_rng(1))
    shares = [np.mean(reps == v) for v in (0.0, 0.5, 1.0)]
    assert shares == pytest.approx([0.25, 0.5, 0.25], abs=0.01)


def test_seeds_are_resampled_too():
    # every question gains 0 on seed 1 and 1 on seed 2: resampling questions alone would give a
    # point, resampling the two seeds gives 0, 0.5 or 1 (as two questions above)
    base = np.zeros((2, 50))
    new = np.vstack([np.zeros(50), np.ones(50)])
    r = paired_interval(base, new, resamples=4000)
    assert (r.diff, r.low, r.high, r.seeds, r.questions) == (0.5, 0.0, 1.0, 2, 50)
    one_seed = paired_interval(base[1], new[1])
    assert (one_seed.low, one_seed.high) == (1.0, 1.0)


def test_one_base_serves_every_seed():
    base = [0, 1, 0, 1]
    new = [[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 0, 1]]
    d = differences(base, new)
    assert d.tolist() == [[1, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    assert paired_interval(base, new).diff == pytest.approx(3 / 12)


def test_agrees_with_scipy_on_one_seed():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    base = (rng.random(200) < 0.4).astype(float)
    new = np.where(rng.random(200) < 0.7, 1.0, base)
    ours = paired_interval(base, new, resamples=20_000)
    theirs = stats.bootstrap(
        (new - base,), np.mean, n_resamples=20_000, method="percentile", random_state=3
    ).confidence_interval
    assert ours.low == pytest.approx(theirs.low, abs=0.01)
    assert ours.high == pytest.approx(theirs.high, abs=0.01)


@pytest.mark.parametrize(
    "base, new, message",
    [
        ([1, 0], [1, 0, 1], "base has 2 questions and new 3"),
        ([[1, 0], [0, 0]], [[1, 0], [0, 0], [1, 1]], "base has 2 seeds and new 3"),
        ([1, float("nan")], [1, 0], "base: scores must be finite"),
    ],
)
def test_bad_shapes_and_values_are_named(base, new, message):
    with pytest.raises(ValueError, match=message):
        paired_interval(base, new)


# -- turnrl compare --------------------------------------------------------------------------------
def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp: Path, name: str, scores: dict[tuple[str, int], float], step: int = 4) -> Path:
    rows = [{"data_source": s, "index": i, "score": v, "response": "x"} for (s, i), v in scores.items()]
    _write(tmp / name / "val_samples" / "step_0.jsonl", [{**r, "score": 0.0} for r in rows])
    _write(tmp / name / "val_samples" / f"step_{step}.jsonl", rows)
    return tmp / name


def test_compare_reads_runs_and_eval_outputs(tmp_path, capsys):
    questions = [("a", i) for i in range(6)] + [("b", i) for i in range(6, 10)]
    untrained = _write(
        tmp_path / "untrained" / "samples.jsonl",
        [{"pass": "greedy", "data_source": s, "index": i, "score": 0.0} for s, i in questions]
        # a sampled pass in the same file is not the greedy headline: left out
        + [{"pass": "sampled", "data_source": s, "index": i, "score": 1.0} for s, i in questions],
    )
    seed1 = _run(tmp_path, "seed1", {q: 1.0 for q in questions}, step=12)  # the newest step is read
    seed2 = _run(tmp_path, "seed2", {q: float(q[0] == "a") for q in questions})
    out = tmp_path / "cmp.json"
    assert (
        main(
            ["compare", "--base", str(untrained.parent), "--new", str(seed1), str(seed2), "--json", str(out)]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "| a | 6 | 2 | 0.000 | 1.000 | +100.0 (95 % +100.0 to +100.0)" in table
    assert "| b | 4 | 2 | 0.000 | 0.500 | +50.0 (95 % +0.0 to +100.0)" in table
    assert "no: not shown" in table.splitlines()[-1]
    data = json.loads(out.read_text())
    assert data["all"]["pooled"]["diff"] == pytest.approx(0.8)
    assert [s["diff"] for s in data["all"]["per_seed"]] == pytest.approx([1.0, 0.6])


def test_compare_threshold_counts_partial_scores_as_misses(tmp_path, capsys):
    a = _run(tmp_path, "a", {("c", i): 0.0 for i in range(4)})
    b = _run(tmp_path, "b", {("c", 0): 1.0, ("c", 1): 0.5, ("c", 2): 0.5, ("c", 3): 0.0})
    assert main(["compare", "--base", str(a), "--new", str(b), "--threshold", "1"]) == 0
    assert "| all | 4 | 1 | 0.000 | 0.250 |" in capsys.readouterr().out


def test_compare_names_the_culprit(tmp_path, capsys):
    a = _run(tmp_path, "a", {("c", i): 0.0 for i in range(4)})
    b = _run(tmp_path, "b", {("c", i): 1.0 for i in range(3)})
    assert main(["compare", "--base", str(a), "--new", str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "b/val_samples/step_4.jsonl: not the same questions" in err
    bad = _write(tmp_path / "bad.jsonl", [{"index": 0, "score": 1.0}])
    bad.write_text(bad.read_text() + "{oops\n")
    assert main(["compare", "--base", str(a), "--new", str(bad)]) == 2
    assert "bad.jsonl:2: not JSON" in capsys.readouterr().err
    nan = _write(tmp_path / "nan.jsonl", [{"index": 0, "score": "high"}])
    assert main(["compare", "--base", str(nan), "--new", str(a)]) == 2
    assert "nan.jsonl:1: field 'score' is 'high', not a finite number" in capsys.readouterr().err
    assert main(["compare", "--base", str(tmp_path / "missing"), "--new", str(a)]) == 2
    assert "missing: no such file or directory" in capsys.readouterr().err
    assert main(["compare", "--base", str(a), str(a), "--new", str(a), str(a), str(a)]) == 2
    assert "--base: give one run or 3" in capsys.readouterr().err


def test_files_without_a_data_source_pair_by_index(tmp_path, capsys):
    old = _write(tmp_path / "old.jsonl", [{"index": i, "score": 0.0} for i in range(3)])
    new = _run(tmp_path, "new", {("turnrl/x", i): 1.0 for i in range(3)})
    assert main(["compare", "--base", str(old), "--new", str(new)]) == 0
    assert "| all | 3 | 1 | 0.000 | 1.000 | +100.0" in capsys.readouterr().out
