"""The bad-input catalogue (docs/errors.md), each input given to `turnrl train` for real.

The command runs in-process through `turnrl.cli.main` (the `cli` fixture): same exit code, same
stderr line, without paying for a new interpreter each time.

Every bad input stops the run with exit code 2 and one line naming the culprit (file, line,
row, key); nothing is written. The cases already covered by test_cli_errors.py (unknown key,
missing model path, missing data file) are not repeated here; inputs that only show once the run
trains are in test_errors_at_run_time.py.
"""

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.bad_input import data_args, good_rows, write_jsonl
from tests.support.cli import one_line_error
from turnrl.tasks.addition import make_row


def assert_nothing_written(work: Path) -> None:
    assert not (work / "run").exists()


# -- data files ------------------------------------------------------------------------------------


def make_empty(work: Path) -> list[str]:
    (work / "empty.jsonl").write_text("")
    return data_args("empty.jsonl")


def make_malformed(work: Path) -> list[str]:
    lines = [json.dumps(r) for r in good_rows(2)] + ['{"prompt": oops}']
    (work / "bad.jsonl").write_text("\n".join(lines) + "\n")
    return data_args("bad.jsonl")


def make_json_array(work: Path) -> list[str]:
    (work / "rows.json").write_text(json.dumps(good_rows(2), indent=2))
    return data_args("rows.json")


def make_no_prompt_jsonl(work: Path) -> list[str]:
    row = {"data_source": "turnrl/addition", "question": "1+1?", "reward_model": {"ground_truth": "2"}}
    return data_args(write_jsonl(work / "noprompt.jsonl", [row]))


def make_no_prompt_parquet(work: Path) -> list[str]:
    row = {"data_source": "turnrl/addition", "question": "1+1?", "reward_model": {"ground_truth": "2"}}
    pq.write_table(pa.Table.from_pylist([row]), work / "noprompt.parquet")
    return data_args("noprompt.parquet")


def make_all_too_long(work: Path) -> list[str]:
    row = {**make_row(1, 2, "train", 0), "prompt": "word " * 400}
    return data_args(write_jsonl(work / "long.jsonl", [row]))


def make_not_utf8(work: Path) -> list[str]:
    good = json.dumps(make_row(1, 2, "train", 0)).encode()
    latin1 = '{"data_source": "turnrl/addition", "prompt": "caf\xe9"}'.encode("latin-1")
    (work / "latin1.jsonl").write_bytes(good + b"\n" + latin1 + b"\n")
    return data_args("latin1.jsonl")


def make_unknown_source(work: Path) -> list[str]:
    rows = [{**r, "data_source": "my/task"} for r in good_rows(8)]
    return data_args(write_jsonl(work / "mine.jsonl", rows), write_jsonl(work / "mine_val.jsonl", rows[:2]))


# -- configs ---------------------------------------------------------------------------------------


def make_recipe_not_yaml(work: Path) -> list[str]:
    (work / "recipe.yaml").write_text("data:\n  train_files: [a.jsonl\n  val_files: b\n")
    return ["recipe.yaml", "model.path=tiny-random"]


def make_recipe_list(work: Path) -> list[str]:
    (work / "recipe.yaml").write_text("- data.train_batch_size=4\n- rollout.n=2\n")
    return ["recipe.yaml", "model.path=tiny-random"]


def make_recipe_binary(work: Path) -> list[str]:
    (work / "recipe.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    return ["recipe.yaml", "model.path=tiny-random"]


def make_run_dir_under_a_file(work: Path) -> list[str]:
    (work / "notes").write_text("a file where a directory should be\n")
    return [*data_args("good.jsonl"), "trainer.default_local_dir=notes/run"]


def make_cuda_without_gpu(work: Path) -> list[str]:
    return [*data_args("good.jsonl"), "trainer.device=cuda"]


# -- models ----------------------------------------------------------------------------------------


def make_directory_of_random_files(work: Path) -> list[str]:
    junk = work / "junk"
    junk.mkdir()
    (junk / "weights.bin").write_bytes(os.urandom(256))
    (junk / "README").write_text("not a model\n")
    return ["model.path=junk", "data.train_files=[good.jsonl]", "data.val_files=[val.jsonl]"]


def make_text_file(work: Path) -> list[str]:
    (work / "model.txt").write_text("a text file, not a model\n")
    return ["model.path=model.txt", "data.train_files=[good.jsonl]", "data.val_files=[val.jsonl]"]


def make_text_file_named_gguf(work: Path) -> list[str]:
    (work / "model.gguf").write_text("a text file, not a GGUF\n")
    return [
        f"model.cache_dir={work / 'cache'}",
        "model.path=model.gguf",
        "data.train_files=[good.jsonl]",
        "data.val_files=[val.jsonl]",
    ]


CASES = {
    "empty data file": (make_empty, r"data file empty\.jsonl has no rows"),
    "malformed JSON line": (make_malformed, r"bad\.jsonl:3: not valid JSON \(Expecting value at column 12\)"),
    "a .json file holding a JSON array": (
        make_json_array,
        r"rows\.json:1: not valid JSON \(Expecting value at column 2\); rows must be one JSON object per line "
        r"\(JSONL\), not one JSON document",
    ),
    "jsonl row without the prompt key": (
        make_no_prompt_jsonl,
        r"noprompt\.jsonl row 0: row has no 'prompt' field \(data\.prompt_key\); its fields: data_source, question, reward_model",
    ),
    "parquet row without the prompt key": (
        make_no_prompt_parquet,
        r"noprompt\.parquet row 0: row has no 'prompt' field \(data\.prompt_key\); its fields: data_source, question, reward_model",
    ),
    "every prompt too long": (
        make_all_too_long,
        r"every prompt in long\.jsonl is longer than data\.max_prompt_length=256 tokens \(1 dropped, longest \d+\); raise data\.max_prompt_length",
    ),
    "bytes that are not UTF-8": (
        make_not_utf8,
        r"latin1\.jsonl:2: not UTF-8 text \(byte 0xe9 at column 50\); save the file as UTF-8",
    ),
    "unknown data_source without a custom reward": (
        make_unknown_source,
        r"no reward function for data_source 'my/task'; registered: \[.*'turnrl/addition'.*\]; or set reward\.custom_function\.path",
    ),
    "recipe that is not YAML": (
        make_recipe_not_yaml,
        r"recipe recipe\.yaml is not valid YAML: expected ',' or '\]', but got ':' at line 3, column 12",
    ),
    "recipe that is a YAML list": (
        make_recipe_list,
        r"recipe recipe\.yaml must be a mapping of sections \(data:, actor:, \.\.\.\), got a YAML list",
    ),
    "recipe that is not text": (
        make_recipe_binary,
        r"recipe recipe\.yaml is not UTF-8 text \(byte offset 0\); is it a YAML file\?",
    ),
    "run directory under a file": (
        make_run_dir_under_a_file,
        r"run directory \(trainer\.default_local_dir\) notes/run: notes is a file, not a directory",
    ),
    "model path: a directory of random files": (
        make_directory_of_random_files,
        r"model directory junk has no config\.json; is it a Hugging Face model directory\?",
    ),
    "model path: a text file": (
        make_text_file,
        r"model path 'model\.txt' is a file but not a \.gguf file; use a Hugging Face model directory.*, "
        r"a \.gguf file, 'smollm2-135m-instruct' or 'tiny-random'",
    ),
    "model path: a text file named .gguf": (
        make_text_file_named_gguf,
        r"cannot load GGUF file model\.gguf: .*not a GGUF file\.?",
    ),
}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_the_culprit(work, train, case):
    make, expected = CASES[case]
    args = make(work)
    if not any(a.startswith("trainer.default_local_dir=") for a in args):
        args.append("trainer.default_local_dir=run")
    line = one_line_error(train(work, *args))
    assert re.fullmatch(f"turnrl train: {expected}", line), line
    assert_nothing_written(work)


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("actor.learning_rate=1e-5", "actor.optim.lr"),  # TRL's name
        ("actor.ppo_micro_batch_size_per_gpu=4", "actor.ppo_micro_batch_size"),  # verl's
        ("critic.max_grad_norm=1.0", "critic.optim.grad_clip"),
        ("rollout.nn=4", "rollout.n"),  # a typo
    ],
)
def test_unknown_key_suggests_the_key_meant(override, suggestion):
    from turnrl.config import ConfigError, load_config

    key = override.split("=")[0]
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert (
        str(err.value) == f"unknown config key '{key}' in override '{override}'; did you mean '{suggestion}'?"
    )


@pytest.mark.timeout(200)
def test_cuda_without_a_gpu(work, train):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    line = one_line_error(train(work, *make_cuda_without_gpu(work), "trainer.default_local_dir=run"))
    assert line == "turnrl train: trainer.device=cuda but no CUDA device is available; use trainer.device=cpu"
    assert_nothing_written(work)


@pytest.mark.timeout(200)
def test_run_directory_without_write_permission(work, train):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    locked = work / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        line = one_line_error(train(work, *data_args("good.jsonl"), "trainer.default_local_dir=locked/run"))
    finally:
        locked.chmod(0o755)
    assert line == (
        "turnrl train: run directory (trainer.default_local_dir) locked/run: cannot create (Permission denied)"
    )


# -- models that are almost models -------------------------------------------------------------


def save_tiny(tiny, directory: Path) -> Path:
    model, tokenizer = tiny
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.timeout(200)
def test_model_directory_with_corrupt_weights(work, tiny, train):
    model_dir = save_tiny(tiny, work / "corrupt")
    (model_dir / "model.safetensors").write_bytes(b"\xff" * 1000)  # a header length of 2**64 - 1 bytes
    line = one_line_error(
        train(work, "model.path=corrupt", "data.train_files=[good.jsonl]", "data.val_files=[val.jsonl]",
              "trainer.default_local_dir=run")
    )  # fmt: skip
    assert line == (
        "turnrl train: cannot load model from corrupt: SafetensorError: Error while deserializing header: "
        "header too large"
    )
    assert_nothing_written(work)


@pytest.mark.timeout(200)
def test_tokenizer_without_a_chat_template_for_chat_prompts(work, tiny, train):
    base = save_tiny(tiny, work / "base")
    # a base model: no chat template in either of the places transformers keeps it
    (base / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    line = one_line_error(
        train(work, "model.path=base", "data.train_files=[good.jsonl]", "data.val_files=[val.jsonl]",
              "trainer.default_local_dir=run")
    )  # fmt: skip
    assert line == (
        "turnrl train: good.jsonl row 0: cannot apply the tokenizer's chat template: the tokenizer of base "
        "has none (a base model?); chat-format prompts need an instruct model"
    )
    assert_nothing_written(work)
