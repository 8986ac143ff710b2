"""Optional metric sinks: a clear start-up error when their package is missing, real files when present."""

import json
import sys

import pytest

from turnrl.tracking.logger import Tracker
from turnrl.tracking.sinks import SinkUnavailable, check_sinks


@pytest.mark.parametrize("sink", ["tensorboard", "wandb"])
def test_named_but_missing_package_fails_with_one_line(tmp_path, monkeypatch, sink):
    # a None entry in sys.modules makes `import <name>` raise ImportError, as on a machine without it
    monkeypatch.setitem(sys.modules, sink, None)
    with pytest.raises(SinkUnavailable) as err:
        Tracker(tmp_path, ["console", "jsonl", sink])
    msg = str(err.value)
    assert "\n" not in msg
    assert f"trainer.logger names '{sink}'" in msg and f"pip install {sink}" in msg
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing was opened before the error


def test_console_and_jsonl_need_nothing_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    check_sinks(["console", "jsonl"])


def test_tensorboard_sink_writes_readable_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(tmp_path, ["jsonl", "tensorboard"])
    tracker.log({"critic/score/mean": 0.25, "actor/grad_norm": float("inf"), "note": "text"}, step=1)
    tracker.log({"critic/score/mean": 0.75}, step=2)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("critic/score/mean")] == [(1, 0.25), (2, 0.75)]
    assert "note" not in acc.Tags()["scalars"]  # only numbers go to TensorBoard
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["actor/grad_norm"] == "inf" and rows[1]["step"] == 2  # jsonl unchanged alongside


@pytest.mark.timeout(120)
def test_wandb_sink_offline_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    tracker = Tracker(tmp_path, ["wandb"], project="p", experiment="e", config={"rollout": {"n": 4}})
    tracker.log({"critic/score/mean": 0.5}, step=1)
    tracker.close()
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    runs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), list((tmp_path / "wandb").iterdir())
