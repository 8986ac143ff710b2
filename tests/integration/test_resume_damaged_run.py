"""Resuming a run directory that is damaged: one line naming the culprit (exit code 2, no
traceback), found before anything of the run is moved, rewritten or trained; or, where the damage
is to what a resume may skip (metrics rows), a warning and the run goes on.

One finished 1-step tiny run is made once for the module; each test resumes a damaged copy.
"""

import shutil
from pathlib import Path

import pytest

from tests.support.bad_input import good_rows, write_jsonl
from tests.support.cli import one_line_error, process_state
from turnrl.cli import main

TINY = (
    "model.path=tiny-random",
    "data.train_batch_size=2",
    "actor.ppo_mini_batch_size=2",
    "rollout.n=2",
    "data.max_response_length=8",
    "trainer.val_before_train=false",
    "trainer.test_freq=0",
    "trainer.num_threads=1",
    "trainer.logger=[jsonl]",
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, list[str]]:
    """(a finished 1-step run, the arguments that made it, less its directory and step count)."""
    work = tmp_path_factory.mktemp("damaged_resume")
    write_jsonl(work / "val.jsonl", good_rows(2))
    write_jsonl(work / "good.jsonl", good_rows(4))
    args = [*TINY, f"data.train_files=[{work / 'good.jsonl'}]", f"data.val_files=[{work / 'val.jsonl'}]"]
    with process_state():
        made = main(
            ["train", *args, "trainer.total_training_steps=1", f"trainer.default_local_dir={work / 'run'}"]
        )
    assert made == 0
    return work / "run", args


def damaged_copy(finished, tmp_path: Path) -> tuple[Path, list[str]]:
    run, args = finished
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy, [*args, "trainer.total_training_steps=2", f"trainer.default_local_dir={copy}"]


def snapshot(run: Path) -> dict[str, bytes | None]:
    """Every path under `run` with a file's bytes (None for a directory)."""
    return {str(p.relative_to(run)): p.read_bytes() if p.is_file() else None for p in sorted(run.rglob("*"))}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("damage", "culprit"),
    [
        ("metrics.jsonl", "metrics.jsonl is a directory, not a file"),
        ("config.yaml", "config.yaml is a directory, not a file"),
        ("checkpoints/latest", "checkpoints/latest is a directory, not a file"),
        ("checkpoints", "checkpoints is a file, not a directory"),
    ],
)
def test_resume_into_a_run_with_a_file_or_directory_in_the_way_is_one_line_before_anything_moves(
    finished, tmp_path, cli, damage, culprit
):
    run, args = damaged_copy(finished, tmp_path)
    target = run / damage
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    target.mkdir() if damage != "checkpoints" else target.write_text("")
    before = snapshot(run)
    line = one_line_error(cli("train", *args, cwd=tmp_path))
    assert line == f"turnrl train: run directory (trainer.default_local_dir) {run}: {run}/{culprit}"
    assert snapshot(run) == before  # no row moved to metrics.replayed.jsonl, no .config.yaml.tmp


@pytest.mark.timeout(120)
def test_resume_from_a_checkpoint_of_another_size_of_model_names_the_tensor_and_both_shapes(
    finished, tmp_path, cli
):
    from transformers import AutoModelForCausalLM

    from turnrl.models.loader import load_tokenizer, tiny_random_config

    tokenizer = load_tokenizer("tiny-random", "")
    config = tiny_random_config(len(tokenizer), tokenizer)
    config.hidden_size, config.intermediate_size = 32, 64  # tiny-random has 64 and 128
    small = tmp_path / "tiny32"
    AutoModelForCausalLM.from_config(config).save_pretrained(small)
    tokenizer.save_pretrained(small)
    run, args = damaged_copy(finished, tmp_path)
    before = snapshot(run)
    line = one_line_error(cli("train", *args, f"model.path={small}", cwd=tmp_path))
    weights = run / "checkpoints" / "step_1" / "actor" / "weights.safetensors"
    vocab = config.vocab_size
    assert line == (
        f"turnrl train: checkpoint {weights} does not match the model: model.embed_tokens.weight has "
        f"shape [{vocab}, 64] in the checkpoint, [{vocab}, 32] in the model"
    )
    assert snapshot(run) == before  # config.yaml still the run's own: the failed resume changed nothing


@pytest.mark.timeout(180)
def test_resume_drops_metrics_rows_without_an_integer_step_with_a_warning(finished, tmp_path, caplog):
    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    run, args = damaged_copy(finished, tmp_path)
    metrics = run / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good + 'not json at all\n{"step": "x"}\n[1,2]\n{"step": null}\n')
    with process_state():
        trainer = Trainer(load_config(None, args))  # resumes: the rows of later steps are rewound
        trainer.close()
    assert trainer.state.global_step == 1
    assert metrics.read_text() == good
    assert f"{metrics}: dropped 4 line(s) that are no metrics row" in caplog.text
