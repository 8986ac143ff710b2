"""Bad input that only shows once `turnrl train` runs: prompts over the length limit (dropped and
counted), a micro-batch too large for memory, reward functions that raise, hang or return junk.

The runs go in-process through `turnrl.cli.main` (the `cli` fixture), except those that need
limits of their own (an address-space cap): those run `turnrl train` as a process.
"""

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bad_input import (
    TINY_RUN,
    data_args,
    good_rows,
    train_process,
    write_jsonl,
)
from tests.support.cli import one_line_error
from turnrl.tasks.addition import make_row

ROOT = Path(__file__).resolve().parents[2]


# -- prompts over the length limit: dropped and counted --------------------------------------------


@pytest.mark.timeout(400)
def test_overlong_prompts_are_dropped_and_counted(work, train, caplog):
    rows = [*good_rows(4), {**make_row(1, 2, "train", 99), "prompt": "word " * 400}]
    proc = train(work, *data_args(write_jsonl(work / "mixed.jsonl", rows)), *TINY_RUN,
                 "trainer.default_local_dir=run")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(  # a warning; the console script's logging writes it to stderr
        r"dropped 1 prompt\(s\) longer than data\.max_prompt_length=256 tokens in mixed\.jsonl "
        r"\(of 5 rows; longest \d+\)",
        caplog.text,
    ), caplog.text[-2000:]


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


@pytest.mark.slow  # ~15-50 s: the default run stays under 10 minutes on 2 cores
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

    proc = train_process(
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
    """What the reward child (started by the run, so it inherits the environment) reads."""
    return {"MISBEHAVE": how, "GOOD_CALLS": str(good_calls)}


def metrics_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(400)
def test_reward_function_that_raises_in_the_first_step_stops_the_run(work, train):
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
def test_reward_function_that_hangs_scores_0_under_zero_and_training_goes_on(work, train, caplog):
    (work / "my_reward.py").write_text(REWARD)
    proc = train(work, *data_args("good.jsonl"), *TINY_RUN, "reward.custom_function.path=my_reward.py",
                 "reward.on_error=zero", "reward.timeout_s=1", "trainer.default_local_dir=run",
                 env=reward_env("hang"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    step, val = metrics_of(work / "run")
    assert step["reward/errors"] == 4.0 and step["critic/score/max"] == 0.0  # 2 prompts x 2 samples
    assert val["val/reward/errors"] == 2.0
    assert "did not return within reward.timeout_s=1s" in caplog.text


@pytest.mark.timeout(500)
def test_reward_function_that_fails_after_the_first_step_is_counted_by_default(work, train):
    (work / "my_reward.py").write_text(REWARD)
    proc = train(work, *data_args("good.jsonl"), *TINY_RUN[:-3], "trainer.total_training_steps=2",
                 "trainer.val_before_train=false", "trainer.test_freq=0",
                 "reward.custom_function.path=my_reward.py", "trainer.default_local_dir=run",
                 env=reward_env("nan", good_calls=4))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second, val = metrics_of(work / "run")
    assert first["reward/errors"] == 0.0 and second["reward/errors"] == 4.0
    assert val["val/reward/errors"] == 2.0
