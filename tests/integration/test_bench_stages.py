"""`benchmarks/_cli.Stages`: what `--resume` in the chained benchmarks (code_agent, cold_start) reuses,
with a real `turnrl data code_sft` child process as the stage."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_cli():
    spec = importlib.util.spec_from_file_location("bench_cli", ROOT / "benchmarks" / "_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demos(out: Path, n: int) -> tuple[str, Path, list[str], Path]:
    """A stage: `n` code demonstrations, a couple of seconds."""
    target = out / "demos"
    args = ["data", "code_sft", "--out", str(target), "--n", str(n), "--seed", "1"]
    return "demos", target / "train.jsonl", args, out / "demos.log"


def test_a_finished_stage_is_reused_and_another_command_is_refused(tmp_path):
    bench = load_cli()
    key, output, args, log = demos(tmp_path, 4)
    wall = bench.Stages(tmp_path, resume=False).run(key, output, args, log)
    assert output.exists() and len(output.read_text().splitlines()) == 4
    recorded = json.loads((tmp_path / "stages.json").read_text())[key]
    assert recorded["wall_s"] == wall
    assert recorded["command"][3] == "{out}/demos"  # the out directory is recorded as {out}

    log.unlink()
    assert bench.Stages(tmp_path, resume=True).run(key, output, args, log) == wall
    assert not log.exists()  # reused: no process ran

    _, _, other, _ = demos(tmp_path, 5)
    with pytest.raises(SystemExit) as refused:
        bench.Stages(tmp_path, resume=True).run(key, output, other, log)
    assert str(refused.value) == (
        f"--resume: stage demos in {tmp_path} ran `--n 4` where this run asks `--n 5`; use another --out"
    )
    assert len(output.read_text().splitlines()) == 4  # what the stage wrote is untouched


def test_a_moved_directory_still_resumes_and_the_thread_count_is_not_compared(tmp_path):
    bench = load_cli()
    first, moved = tmp_path / "a", tmp_path / "b"
    key, output, args, log = demos(first, 4)
    wall = bench.Stages(first, resume=False).run(key, output, args, log)
    first.rename(moved)
    key, output, args, log = demos(moved, 4)
    log.unlink()  # moved with the directory
    assert bench.Stages(moved, resume=True).run(key, output, args, log) == wall
    assert not log.exists()
    # the same stage on 1 or 2 threads computes the same thing: the count is left out of the record
    stages = bench.Stages(moved, resume=False)
    assert stages.command(["sft", "trainer.num_threads=2", f"trainer.default_local_dir={moved}/sft"]) == [
        "sft", "trainer.default_local_dir={out}/sft",
    ]  # fmt: skip


def test_two_processes_in_one_out_keep_each_others_stages(tmp_path):
    # a benchmark on seed 1 and another on seed 2, both started before either wrote a stage
    bench = load_cli()
    one, two = bench.Stages(tmp_path, resume=True), bench.Stages(tmp_path, resume=True)
    key, output, args, log = demos(tmp_path, 4)
    one.run(key, output, args, log)
    other = tmp_path / "demos2"
    two.run(
        "demos2",
        other / "train.jsonl",
        ["data", "code_sft", "--out", str(other), "--n", "3"],
        tmp_path / "d2.log",
    )
    recorded = json.loads((tmp_path / "stages.json").read_text())
    assert set(recorded) == {"demos", "demos2"}  # the second write kept the first one's stage
    assert not list(tmp_path.glob("stages.*.tmp"))  # written whole, through a renamed temporary file


def test_a_stage_whose_output_is_gone_runs_again_and_old_records_are_read(tmp_path):
    bench = load_cli()
    key, output, args, log = demos(tmp_path, 4)
    # a stages.json from before commands were recorded: the stage's seconds only
    (tmp_path / "stages.json").write_text(json.dumps({key: 12.5}))
    assert bench.Stages(tmp_path, resume=True).run(key, output, args, log) != 12.5  # no output: it ran
    assert output.exists() and log.exists()
    (tmp_path / "stages.json").write_text(json.dumps({key: 12.5}))
    assert bench.Stages(tmp_path, resume=True).run(key, output, args, log) == 12.5  # output there: reused
    assert bench.Stages(tmp_path, resume=False).done == {}  # without --resume nothing recorded is read


@pytest.mark.parametrize(
    ("text", "says"), [("{not json", "is not valid JSON (Expecting"), ("[1, 2]", "holds a list, not")]
)
def test_a_broken_record_is_refused_in_one_line(tmp_path, text, says):
    (tmp_path / "stages.json").write_text(text)
    with pytest.raises(SystemExit) as refused:
        load_cli().Stages(tmp_path, resume=True)
    assert str(refused.value).startswith(f"--resume: {tmp_path / 'stages.json'} {says}")
    assert "\n" not in str(refused.value)


def test_words_joins_options_to_their_values():
    bench = load_cli()
    assert bench.words(["data", "code_sft", "--out", "d", "--n", "4", "--tiny", "--seed", "1"]) == [
        "data", "code_sft", "--out d", "--n 4", "--tiny", "--seed 1",
    ]  # fmt: skip
