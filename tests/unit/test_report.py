"""`turnrl report`: plots from a good metrics.jsonl, and what it says about bad ones."""

import json
from pathlib import Path

import pytest

from turnrl.cli import main
from turnrl.tracking.report import make_report, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STAGES = ("gen", "reward", "old_log_prob", "adv", "update_actor")


def step_row(step: int) -> dict:
    row = {
        "step": step,
        "critic/score/mean": 0.1 * step,
        "critic/score/min": 0.0,
        "critic/score/max": 0.2 * step,
        "actor/ppo_kl": 0.001 * step,
        "actor/entropy": 2.0 - 0.1 * step,
        "response_length/mean": 10.0 + step,
        "response_length/min": 5.0,
        "response_length/max": 16.0,
        "actor/pg_clipfrac": 0.01,
        "actor/grad_norm": 1.5,
        "perf/throughput": 900.0 + step,
        "timing_s/step": 1.0,
        "training/global_step": step,
    }
    row.update({f"timing_s/{s}": 0.2 for s in STAGES})
    return row


def write_rows(run: Path, rows: list, tail: str = "") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    (run / "metrics.jsonl").write_text(text + tail)
    return run


def test_good_run_gets_every_plot_its_metrics_allow(tmp_path, capsys):
    rows = [{"step": 0, "val/test_score/mean": 0.05}, *[step_row(s) for s in range(1, 6)]]
    rows.append({"step": 5, "val/test_score/mean": 0.4, "timing_s/validate": 2.0})
    run = write_rows(tmp_path / "run", rows)
    assert main(["report", str(run)]) == 0
    out = run / "report"
    expected = [
        "score",
        "kl",
        "entropy",
        "response_length",
        "clip_fraction",
        "grad_norm",
        "timing",
        "throughput",
    ]
    html = (out / "report.html").read_text()
    for name in expected:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, name
        assert f'src="{name}.png"' in html
    # metrics that are not in the run get no plot (no critic loss, no log-prob gap)
    assert not (out / "logprob_gap.png").exists()
    assert "Missing or unreadable" not in html
    assert "training/global_step" in html  # listed among the metrics not plotted
    assert capsys.readouterr().err == ""


def test_truncated_last_line_is_reported_and_the_rest_plotted(tmp_path, capsys):
    run = write_rows(tmp_path / "run", [step_row(s) for s in range(1, 4)], tail='{"step": 4, "critic/sco')
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert "metrics.jsonl line 4: the last line is cut off" in err
    html = (run / "report" / "report.html").read_text()
    assert "line 4: the last line is cut off" in html
    assert (run / "report" / "score.png").read_bytes()[:8] == PNG_MAGIC
    log = read_metrics(run / "metrics.jsonl")
    assert log.rows == 3 and [s for s, _ in log.series["critic/score/mean"]] == [1, 2, 3]


def test_empty_metrics_file(tmp_path, capsys):
    run = write_rows(tmp_path / "run", [])
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert "is empty" in err and len(err.splitlines()) == 1
    assert "is empty" in (run / "report" / "report.html").read_text()
    assert not list((run / "report").glob("*.png"))


def test_run_dir_without_metrics(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    assert main(["report", str(run)]) == 1
    assert "no metrics file" in capsys.readouterr().err
    assert "no metrics file" in (run / "report" / "report.html").read_text()


def test_a_failed_report_always_says_why(tmp_path, capsys):
    """Exit 1 once came with no reason: rows whose values are text or lists, or a metrics.jsonl
    that is a directory ("does not exist" before)."""
    run = write_rows(tmp_path / "run", [{"step": 1, "a": "str"}, {"step": 2, "a": [1]}])
    assert main(["report", str(run)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"turnrl report: {run / 'metrics.jsonl'}: no metric holds a number, so there is nothing to plot"
    ]
    other = tmp_path / "other"
    (other / "metrics.jsonl").mkdir(parents=True)
    assert main(["report", str(other)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"turnrl report: no metrics file: {other / 'metrics.jsonl'} is a directory, not a file"
    ]


def test_missing_run_dir_is_one_line_and_writes_nothing(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"turnrl report: run directory not found: {missing}"
    assert not missing.exists()


def test_bad_middle_line_non_finite_values_and_resumed_steps(tmp_path):
    rows = [step_row(1), step_row(2), "not json", step_row(3)]
    rows[1]["actor/grad_norm"] = "inf"  # the Tracker's spelling of a non-finite float
    again = step_row(3) | {"critic/score/mean": 0.9}  # a resumed run logs step 3 a second time
    run = write_rows(tmp_path / "run", [*rows, again])
    log = read_metrics(run / "metrics.jsonl")
    assert any("line 3: not valid JSON" in p for p in log.problems)
    assert log.series["critic/score/mean"][-1] == (3, 0.9)  # the later value wins
    report = make_report(run)
    assert "actor/grad_norm: 1 non-finite value(s) (NaN/inf) not plotted" in report.problems
    assert report.plots["grad_norm.png"] == ["actor/grad_norm"]


def test_stale_plots_of_an_earlier_report_are_removed(tmp_path):
    run = write_rows(tmp_path / "run", [step_row(1), step_row(2)])
    make_report(run)
    assert (run / "report" / "kl.png").exists()
    write_rows(run, [{k: v for k, v in step_row(s).items() if k != "actor/ppo_kl"} for s in (1, 2)])
    report = make_report(run)
    assert "kl.png" not in report.plots and not (run / "report" / "kl.png").exists()


@pytest.mark.parametrize("content", ["[1, 2]\n", '{"no_step": 1}\n'])
def test_rows_that_are_not_step_objects(tmp_path, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(content)
    log = read_metrics(run / "metrics.jsonl")
    assert log.rows == 0 and "line 1: not an object with an integer 'step'" in log.problems[0]
