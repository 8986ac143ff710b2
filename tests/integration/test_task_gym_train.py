"""`turnrl train` on a reasoning-gym task: one tiny step that reports accuracy and format rate, and
the one-line errors of a bad task, dataset or task argument (docs/errors.md, "Tasks")."""

import json
import sys

import pytest

from tests.support.bad_input import TINY_RUN
from tests.support.cli import one_line_error
from turnrl.tasks import gym

pytest.importorskip("reasoning_gym")

# the smallest gym run: 8 training rows, 4 validation questions, validated after its one step
GYM_RUN = (
    "model.path=tiny-random",
    "data.task=reasoning_gym:chain_sum",
    "data.task_args.size=8",
    "data.task_args.val_size=4",
    *(o for o in TINY_RUN if not o.startswith("trainer.test_freq")),
    "trainer.test_freq=1",
    "trainer.logger=[jsonl]",
)


@pytest.mark.slow  # ~30-50 s: the default run stays under 10 minutes on 2 cores
@pytest.mark.timeout(300)
def test_one_step_on_chain_sum_reports_accuracy_and_format_rate(tmp_path, cli):
    run = tmp_path / "run"
    result = cli(
        "train", *GYM_RUN, f"trainer.default_local_dir={run}", f"model.cache_dir={tmp_path / 'cache'}"
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["val/test_score/reasoning_gym/chain_sum"] >= 0.0
    # the scorer's extras, as the lead's validation reports them (`val/acc/mean` before it)
    accuracy = last.get("val/accuracy", last.get("val/acc/mean"))
    assert accuracy is not None and 0.0 <= accuracy <= 1.0
    assert 0.0 <= last.get("val/format_rate", last.get("val/formatted/mean")) <= 1.0
    assert any("reward_extra/gym_score/mean" in r for r in rows)
    # the rows were cached under a name carrying the task's arguments
    [cached] = (tmp_path / "cache" / "tasks").iterdir()
    assert cached.name.startswith("reasoning_gym_chain_sum-seed") and "-args" in cached.name


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["data.task=chess"],
            "unknown 'data.task' 'chess'; valid: addition, calculator, code, search, harbor, reasoning_gym:<dataset>",
        ),
        (["data.task=reasoning_gym:chian_sum"], "unknown reasoning-gym dataset 'chian_sum'; valid: "),
        (
            ["data.task=reasoning_gym:chain_sum", "data.task_args.sise=3"],
            "task 'reasoning_gym:chain_sum' takes no argument 'sise'; its arguments: size, val_size,",
        ),
        (
            ["data.task=reasoning_gym:chain_sum", "data.task_args.min_terms=0"],
            "task 'reasoning_gym:chain_sum' rejects its arguments (min_terms=0): min_terms must be positive",
        ),
        (["data.task=addition", "data.task_args.size=3"], "task 'addition' takes no argument 'size'"),
    ],
)
def test_bad_task_input_is_one_line(tmp_path, cli, overrides, expected):
    run = tmp_path / "run"
    line = one_line_error(
        cli(
            "train",
            "model.path=tiny-random",
            *overrides,
            f"trainer.default_local_dir={run}",
            f"model.cache_dir={tmp_path}",
        )
    )
    assert expected in line, line
    assert not run.exists()


def test_without_reasoning_gym_the_line_says_how_to_install(tmp_path, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` raises ImportError
    line = one_line_error(cli("train", *GYM_RUN, f"trainer.default_local_dir={tmp_path / 'run'}"))
    assert line == f"turnrl train: reasoning-gym tasks need the reasoning-gym package: {gym.INSTALL}"


def test_gym_rows_from_files_need_the_package_too(tmp_path, cli, monkeypatch):
    # rows written by `turnrl data task reasoning_gym:...`, trained on as data files
    assert (
        cli(
            "data", "task", "reasoning_gym:chain_sum", "--out", str(tmp_path / "d"), "--arg", "size=4"
        ).returncode
        == 0
    )
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    files = [
        f"data.train_files=[{tmp_path / 'd' / 'train.jsonl'}]",
        f"data.val_files=[{tmp_path / 'd' / 'val.jsonl'}]",
    ]
    line = one_line_error(
        cli("train", "model.path=tiny-random", *files, f"trainer.default_local_dir={tmp_path / 'run'}")
    )
    assert "pip install -e" in line
    assert not (tmp_path / "run").exists()


def test_data_task_bad_arg_syntax_is_one_line(tmp_path, cli):
    out = tmp_path / "o"
    result = cli("data", "task", "reasoning_gym:chain_sum", "--out", str(out), "--arg", "size")
    assert one_line_error(result, "data") == (
        "turnrl data: --arg 'size' is not of the form KEY=VALUE (e.g. --arg size=200)"
    )
    assert not out.exists()


def test_a_row_count_that_is_not_one_stops_the_run_before_any_model_loads(tmp_path, cli, monkeypatch):
    from turnrl.trainer import setup

    def no_model(*args, **kwargs):
        raise AssertionError("the tokenizer loaded: the task argument was checked too late")

    monkeypatch.setattr(setup, "load_tokenizer", no_model)
    run, cache = tmp_path / "run", tmp_path / "cache"
    line = one_line_error(
        cli(
            "train",
            "model.path=tiny-random",
            "data.task_args.n_train=abc",
            f"trainer.default_local_dir={run}",
            f"model.cache_dir={cache}",
        )
    )
    assert line == "turnrl train: task 'addition': argument 'n_train' must be a positive integer, got 'abc'"
    assert not run.exists() and not cache.exists()  # no run directory, no cached rows
