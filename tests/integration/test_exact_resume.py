"""Stop anywhere, resume exactly: the metrics of the steps after a resume, and the final weights,
are those of the run that was never stopped (CPU: identical, not close)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.support.scripted_engine import ScriptedEngine
from tests.support.tiny_runs import (
    VARYING,
    metrics,
    policy,
    reward_file,
    same_metrics,
    tiny_overrides,
    val_file,
)
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

ROOT = Path(__file__).resolve().parents[2]


def steady(row: dict) -> dict:
    """A metrics row without what the clock decides."""
    return {k: v for k, v in row.items() if not k.startswith(VARYING)}


@pytest.mark.slow  # the default run keeps the SIGKILL resume test
@pytest.mark.timeout(400)
def test_calculator_agent_resumes_exactly(tmp_path):
    """Multi-turn episodes with tool calls: the agent loop's sampling, the calculator's answers
    and the masks all continue where they stopped."""
    recipe = str(ROOT / "examples" / "calculator_agent.yaml")

    def make(where: str, steps: int) -> Trainer:
        overrides = [
            "model.path=tiny-random",
            f"trainer.total_training_steps={steps}",
            "trainer.test_freq=0",
            "trainer.val_before_train=false",
            "trainer.rollout_dump_freq=0",
            "trainer.logger=[jsonl]",
            "data.train_batch_size=4",
            "rollout.n=4",
            "data.max_response_length=32",
            "rollout.multi_turn.max_tokens_per_turn=16",
            f"trainer.default_local_dir={tmp_path / where}",
        ]
        trainer = Trainer(load_config(recipe, overrides))
        # a random tiny model never writes a well-formed call: its first turn is scripted (a
        # calculator call that depends on the prompt), every later token sampled by the model
        tok = trainer.tokenizer
        loop = trainer.rollout.loop  # type: ignore[attr-defined]

        def first_turn(context: list[int]) -> list[int] | None:
            if not tok.decode(context[-3:]).endswith("assistant\n"):
                return None
            call = f"<calculator>{sum(context) % 997} * {len(context)}</calculator>"
            return tok(call, add_special_tokens=False)["input_ids"]

        loop.engine = ScriptedEngine(first_turn, inner=loop.engine)
        return trainer

    straight = make("a", 2)
    straight.fit()
    make("b", 1).fit()
    resumed = make("b", 2)
    assert resumed.state.global_step == 1
    resumed.fit()
    same_metrics(straight, resumed, range(2, 3))
    last = next(m for m in metrics(resumed.run_dir) if m["step"] == 2 and "critic/score/mean" in m)
    assert last["agent/tool_calls/mean"] > 0  # the episodes really went to the tool and back
    for a, b in zip(policy(straight).parameters(), policy(resumed).parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow  # the default run keeps the SIGKILL resume test
@pytest.mark.timeout(300)
def test_steps_replayed_after_a_resume_are_logged_once(tmp_path):
    """A run that logged step 3 and died before checkpointing it replays step 3 from the step-2
    checkpoint: `metrics.jsonl` ends with one row per step, the replaced row is kept aside, and
    the replay gives the very same numbers."""
    over = {"trainer.save_freq": 2, "trainer.total_training_steps": 3}
    resumed = Trainer(load_config(None, tiny_overrides(tmp_path, **over)))
    resumed.val_examples = resumed.val_examples[:16]
    resumed.fit()
    ckpts = resumed.run_dir / "checkpoints"
    # the state a SIGKILL between logging step 3 and its checkpoint leaves behind
    for p in (ckpts / "step_3").iterdir():
        p.unlink() if p.is_file() else [q.unlink() for q in p.iterdir()] and p.rmdir()
    (ckpts / "step_3").rmdir()
    (ckpts / "latest").write_text("step_2")
    with (resumed.run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "actor/pg_lo')  # a line cut off mid-write
    again = Trainer(resumed.cfg)
    again.val_examples = again.val_examples[:16]
    assert again.state.global_step == 2
    again.fit()
    rows = metrics(again.run_dir)
    steps = [r["step"] for r in rows if "critic/score/mean" in r]
    assert steps == [1, 2, 3]
    replayed = [
        json.loads(line) for line in (again.run_dir / "metrics.replayed.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in replayed] == [3, 3]  # the step row and the final validation row
    assert all(r["replayed_after_resume_from"] == 2 for r in replayed)
    new3 = next(r for r in rows if r["step"] == 3 and "critic/score/mean" in r)
    old3 = next(r for r in replayed if "critic/score/mean" in r)
    # the replay gives the numbers the first attempt logged: the same run, not a duplicate
    assert steady(new3) == {k: v for k, v in steady(old3).items() if k != "replayed_after_resume_from"}


@pytest.mark.slow  # determinism: test_numbers_unchanged compares against recorded runs
@pytest.mark.timeout(300)
def test_two_runs_with_the_same_seed_are_identical(tmp_path):
    """The second run also switches on `trainer.deterministic`: on CPU it changes nothing, and no
    op of the loop lacks a deterministic kernel (torch would raise)."""

    def run(where: str, **extra: object) -> list[dict]:
        over = {"trainer.total_training_steps": 1, **extra}
        trainer = Trainer(load_config(None, tiny_overrides(tmp_path / where, **over)))
        trainer.val_examples = trainer.val_examples[:16]
        try:
            trainer.fit()
        finally:
            torch.use_deterministic_algorithms(False)
        return [steady(r) for r in metrics(trainer.run_dir)]

    a = run("a")
    b = run("b", **{"trainer.deterministic": True})
    assert len(a) == 2 and a == b  # the step and the final validation
    c = run("c", **{"trainer.seed": 2})
    assert c[0] != a[0]  # the seed does decide the run


# -- SIGKILL at random moments -----------------------------------------------------------------


def train_cmd(run: Path, reward: str, val: str, steps: int) -> list[str]:
    return [
        sys.executable, "-m", "turnrl.cli", "train", "model.path=tiny-random",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=1", "trainer.test_freq=0",
        "trainer.val_before_train=false", "trainer.logger=[jsonl]", "data.train_batch_size=2",
        "rollout.n=4", "actor.ppo_mini_batch_size=1", "data.max_response_length=8",
        "actor.optim.lr=1e-2", f"reward.custom_function.path={reward}", f"data.val_files=[{val}]",
        f"trainer.default_local_dir={run}",
    ]  # fmt: skip


def kill_mid_save(proc: subprocess.Popen, ckpts: Path, deadline: float) -> bool:
    """SIGKILL `proc` while a checkpoint is being written (its temporary directory exists);
    False if none was seen before `deadline` or the run ended."""
    while time.monotonic() < deadline and proc.poll() is None:
        if ckpts.is_dir() and any(p.name.startswith(".tmp_step_") for p in os.scandir(ckpts)):
            proc.send_signal(signal.SIGKILL)
            return True
        time.sleep(0.0005)
    return False


def soak(tmp_path: Path, kills: int, steps: int, seed: int, at_least: int) -> None:
    """Restart the run until it finishes, SIGKILLing the first `kills` attempts (alternately mid-save
    and at a random moment); at least `at_least` kills, one of them mid-save, must have landed
    before the run got to its end."""

    reward, val = reward_file(tmp_path), val_file(tmp_path)
    ref = tmp_path / "straight"
    start = time.monotonic()
    done = subprocess.run(train_cmd(ref, reward, val, steps), capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    whole_run_s = time.monotonic() - start  # this machine's speed: random kills land before the end

    run = tmp_path / "killed"
    rng = random.Random(seed)
    killed = {"mid_save": 0, "anywhere": 0}
    for attempt in range(kills + 50):
        log = (tmp_path / f"attempt_{attempt}.log").open("w")
        proc = subprocess.Popen(
            train_cmd(run, reward, val, steps), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
        )
        if sum(killed.values()) < kills:
            if attempt % 2 == 0:
                if kill_mid_save(proc, run / "checkpoints", time.monotonic() + 120):
                    killed["mid_save"] += 1
            else:
                try:  # anywhere: start-up, rollout, update, save
                    proc.wait(timeout=rng.uniform(0.1, 0.7) * whole_run_s)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    killed["anywhere"] += 1
        rc = proc.wait(timeout=600)
        log.close()
        if rc == 0:
            break
        assert rc == -signal.SIGKILL, (tmp_path / f"attempt_{attempt}.log").read_text()[-2000:]
    assert rc == 0 and killed["mid_save"] >= 1 and sum(killed.values()) >= at_least, killed

    a = load_file(str(ref / "checkpoints" / f"step_{steps}" / "actor" / "weights.safetensors"))
    b = load_file(str(run / "checkpoints" / f"step_{steps}" / "actor" / "weights.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows_a = [steady(r) for r in metrics(ref)]
    rows_b = [steady(r) for r in metrics(run)]
    assert [r["step"] for r in rows_b] == [r["step"] for r in rows_a]  # each step once
    assert rows_a == rows_b


@pytest.mark.slow  # ~30-50 s: the default run stays under 10 minutes on 2 cores
@pytest.mark.timeout(900)
def test_sigkill_at_random_moments_then_the_same_final_weights(tmp_path):
    soak(tmp_path, kills=3, steps=4, seed=0, at_least=2)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sigkill_soak_many_times(tmp_path):
    soak(tmp_path, kills=30, steps=16, seed=1, at_least=25)
