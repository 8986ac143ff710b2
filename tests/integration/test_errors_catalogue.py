"""The bad-input catalogue (docs/errors.md), each input given to `turnrl train` for real.

Every bad input stops the run with exit code 2 and one line naming the culprit (file, line,
row, key); nothing is written. The cases already covered by test_cli_errors.py (unknown key,
missing model path, missing data file) are not repeated here.
"""

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.test_cli_errors import one_line_error
from turnrl.data.tasks.addition import make_row

ROOT = Path(__file__).resolve().parents[2]
# the smallest run that trains: 2 prompts x 2 samples of 8 tokens
TINY_RUN = (
    "data.train_batch_size=2",
    "actor.ppo_mini_batch_size=2",
    "rollout.n=2",
    "data.max_response_length=8",
    "trainer.total_training_steps=1",
    "trainer.val_before_train=false",
    "trainer.test_freq=0",
)


def train(cwd: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """`turnrl train model.path=tiny-random` in `cwd` (so file names in messages are short)."""
    return subprocess.run(
        [sys.executable, "-m", "turnrl.cli", "train", *args],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=cwd,
        **kwargs,
    )


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path.name


def good_rows(n: int) -> list[dict]:
    return [make_row(i % 10, (3 * i) % 10, "train", i) for i in range(n)]


def data_args(train: str, val: str = "val.jsonl") -> list[str]:
    return ["model.path=tiny-random", f"data.train_files=[{train}]", f"data.val_files=[{val}]"]


@pytest.fixture
def work(tmp_path):
    write_jsonl(tmp_path / "val.jsonl", good_rows(2))
    write_jsonl(tmp_path / "good.jsonl", good_rows(8))
    return tmp_path


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
        r"run directory notes/run \(trainer\.default_local_dir\) cannot be written: notes is a file, not a directory",
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
def test_bad_input_is_one_line_naming_the_culprit(work, case):
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
def test_cuda_without_a_gpu(work):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    line = one_line_error(train(work, *make_cuda_without_gpu(work), "trainer.default_local_dir=run"))
    assert line == "turnrl train: trainer.device=cuda but no CUDA device is available; use trainer.device=cpu"
    assert_nothing_written(work)


@pytest.mark.timeout(200)
def test_run_directory_without_write_permission(work):
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
        "turnrl train: run directory locked/run (trainer.default_local_dir) cannot be written: locked is not writable"
    )


# -- models that are almost models -------------------------------------------------------------


def save_tiny(tiny, directory: Path) -> Path:
    model, tokenizer = tiny
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.timeout(200)
def test_model_directory_with_corrupt_weights(work, tiny):
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
def test_tokenizer_without_a_chat_template_for_chat_prompts(work, tiny):
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


# -- prompts over the length limit: dropped and counted --------------------------------------------


@pytest.mark.timeout(400)
def test_overlong_prompts_are_dropped_and_counted(work):
    rows = [*good_rows(4), {**make_row(1, 2, "train", 99), "prompt": "word " * 400}]
    proc = train(work, *data_args(write_jsonl(work / "mixed.jsonl", rows)), *TINY_RUN,
                 "trainer.default_local_dir=run")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(
        r"dropped 1 prompt\(s\) longer than data\.max_prompt_length=256 tokens in mixed\.jsonl "
        r"\(of 5 rows; longest \d+\)",
        proc.stderr,
    ), proc.stderr[-2000:]


# -- a micro-batch too large for memory ------------------------------------------------------------

OOM_PROBE = """
import re, resource, sys
import torch
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.workers.actor import Actor
from turnrl.workers.memory import OutOfMemory

def address_space():
    return int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

cfg = load_config(None, ["model.path=tiny-random", "actor.logprob_chunk_size=100000"])
actor = Actor(cfg.actor, cfg.model, cfg.rollout)
rows, p, r = 16, 8, 128  # one pass over all rows: 2048 tokens x 49152 vocab x 4 bytes = 384 MiB of logits
g = torch.Generator().manual_seed(0)
ids = torch.cat([torch.randint(0, 1000, (2, p), generator=g).repeat_interleave(8, 0),
                 torch.randint(0, 1000, (rows, r), generator=g)], 1)
mask = torch.ones_like(ids)
batch = Batch(tensors={"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1,
                       "responses": ids[:, p:], "response_mask": torch.ones(rows, r)},
              non_tensors={"uid": [i // 8 for i in range(rows)]})
actor.cfg.log_prob_micro_batch_size = 1
old = actor.compute_log_prob(batch)["log_probs"]  # threads and buffers exist before the cap
cap = address_space() + 256 * 2**20  # room for one response's logits, not for 16
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
for key, value in (("log_prob_micro_batch_size", 16), ("ppo_micro_batch_size", 16)):
    setattr(actor.cfg, key, value)
    try:
        if key == "log_prob_micro_batch_size":
            actor.compute_log_prob(batch)
        else:
            batch["old_log_probs"], batch["advantages"] = old, torch.ones(rows, r)
            actor.update(batch, step=1)
        print("no error")
    except OutOfMemory as err:
        print(err)
    setattr(actor.cfg, key, 1)
actor.cfg.log_prob_micro_batch_size = 1
print("lowered:", torch.equal(actor.compute_log_prob(batch)["log_probs"], old))
"""


@pytest.mark.timeout(300)
def test_micro_batch_too_large_for_memory_names_the_key_to_lower():
    """A real allocation failure: the actor runs under an address-space cap with room for a small
    micro-batch only; torch's CPU allocator fails and the actor names the key to lower."""
    # keep glibc's own address-space use steady, so that the cap is about tensors: one arena (each
    # reserves 64 MiB) and every buffer over 1 MiB its own mapping, returned when freed (by default
    # the threshold rises after the first free and the heap keeps buffers the small pass then misses)
    env = {**os.environ, "MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(2**20)}
    proc = subprocess.run(
        [sys.executable, "-c", OOM_PROBE], capture_output=True, text=True, timeout=280, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == (
        "out of memory in the actor's log-prob forward (actor.log_prob_micro_batch_size=16; torch tried to "
        "allocate 384 MiB): lower actor.log_prob_micro_batch_size (e.g. 8), or actor.logprob_chunk_size"
    )
    assert lines[1].startswith(
        "out of memory in the actor update (actor.ppo_micro_batch_size=16; torch tried"
    )
    assert "lower actor.ppo_micro_batch_size (e.g. 8)" in lines[1]
    assert lines[2] == "lowered: True"  # the failed pass left nothing behind: the smaller one fits


def test_torch_out_of_memory_errors_are_recognised_and_named():
    import torch

    from turnrl.workers.memory import is_out_of_memory, out_of_memory_message

    with pytest.raises(RuntimeError) as err:
        torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: more than this machine's address space
    assert "DefaultCPUAllocator: can't allocate memory" in str(err.value)
    assert is_out_of_memory(err.value)
    assert not is_out_of_memory(RuntimeError("The size of tensor a (3) must match the size of tensor b (4)"))
    assert out_of_memory_message(err.value, "critic update", "critic.ppo_micro_batch_size", 16) == (
        "out of memory in the critic update (critic.ppo_micro_batch_size=16; torch tried to allocate "
        "1048576.0 GiB): lower critic.ppo_micro_batch_size (e.g. 8)"
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_micro_batch_too_large_for_memory_through_the_cli(work):
    """The same through `turnrl train` under a 4 GiB address-space cap: 64 responses of 256 tokens
    in one log-prob pass need 3 GiB of logits at once (slow: it generates those tokens first)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    proc = train(
        work, *data_args("good.jsonl"), "data.max_response_length=256", "actor.logprob_chunk_size=1000000",
        "actor.log_prob_micro_batch_size=64", "trainer.total_training_steps=1", "trainer.val_before_train=false",
        "trainer.default_local_dir=run", preexec_fn=cap,
        env={**os.environ, "MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(2**20)},
    )  # fmt: skip
    line = one_line_error(proc)
    assert line.startswith("turnrl train: out of memory in the actor's log-prob forward "), line
    assert "lower actor.log_prob_micro_batch_size (e.g. 32)" in line


# -- reward functions that misbehave ---------------------------------------------------------------

REWARD = """
import os, time

calls = 0


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global calls
    calls += 1
    if calls <= int(os.environ.get("GOOD_CALLS", "0")):
        return 0.0
    how = os.environ["MISBEHAVE"]
    if how == "raise":
        return {"score": 1 / 0}
    if how == "hang":
        time.sleep(600)
    return float("nan") if how == "nan" else "a string"
"""


def reward_env(how: str, good_calls: int = 0) -> dict[str, str]:
    return {**os.environ, "MISBEHAVE": how, "GOOD_CALLS": str(good_calls)}


def metrics_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(400)
def test_reward_function_that_raises_in_the_first_step_stops_the_run(work):
    (work / "my_reward.py").write_text(REWARD)
    proc = train(work, *data_args("good.jsonl"), *TINY_RUN, "reward.custom_function.path=my_reward.py",
                 "trainer.default_local_dir=run", env=reward_env("raise"))  # fmt: skip
    line = one_line_error(proc)
    assert re.fullmatch(
        r"turnrl train: reward function my_reward\.py:compute_score raised ZeroDivisionError: division by zero "
        r"\(my_reward\.py:14\) on row 0 \(index \d, data_source 'turnrl/addition'\) in the first training step; "
        r"fix the function, or set reward\.on_error=zero to score such rows 0 even in the first step",
        line,
    ), line


@pytest.mark.timeout(400)
def test_reward_function_that_hangs_scores_0_under_zero_and_training_goes_on(work):
    (work / "my_reward.py").write_text(REWARD)
    proc = train(work, *data_args("good.jsonl"), *TINY_RUN, "reward.custom_function.path=my_reward.py",
                 "reward.on_error=zero", "reward.timeout_s=1", "trainer.default_local_dir=run",
                 env=reward_env("hang"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    step, val = metrics_of(work / "run")
    assert step["reward/errors"] == 4.0 and step["critic/score/max"] == 0.0  # 2 prompts x 2 samples
    assert val["val/reward/errors"] == 2.0
    assert "did not return within reward.timeout_s=1s" in proc.stderr


@pytest.mark.timeout(500)
def test_reward_function_that_fails_after_the_first_step_is_counted_by_default(work):
    (work / "my_reward.py").write_text(REWARD)
    proc = train(work, *data_args("good.jsonl"), *TINY_RUN[:-3], "trainer.total_training_steps=2",
                 "trainer.val_before_train=false", "trainer.test_freq=0",
                 "reward.custom_function.path=my_reward.py", "trainer.default_local_dir=run",
                 env=reward_env("nan", good_calls=4))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second, val = metrics_of(work / "run")
    assert first["reward/errors"] == 0.0 and second["reward/errors"] == 4.0
    assert val["val/reward/errors"] == 2.0
