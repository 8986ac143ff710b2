"""Async mode through the real loop (`trainer.mode=async`, `rollout.engine=server`, tiny-random, CPU).

- max_staleness=0 is the synchronous run, number for number;
- max_staleness=1 overlaps: a batch is sampled while the previous step trains, one version behind,
  and a checkpoint written while rollouts are buffered resumes with the same prompts at the same steps
  (the buffered ones regenerated and counted): nothing lost, nothing trained twice.
"""

import json
import shutil
from pathlib import Path

import pytest

from tests.support.tiny_runs import SERVER_RUN, VARYING, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

VOLATILE = (*VARYING, "async/")


def run(tmp_path: Path, name: str, **extra: object) -> Path:
    """The shared server run's settings (SERVER_RUN) and `extra`."""
    return Trainer(load_config(None, tiny_overrides(tmp_path / name, **{**SERVER_RUN, **extra}))).fit()


def steps_of(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r]


def prompts_per_step(run_dir: Path) -> dict[int, list[str]]:
    out = {}
    for f in sorted((run_dir / "rollouts").glob("step_*.jsonl")):
        out[int(f.stem.removeprefix("step_"))] = sorted(
            json.loads(x)["prompt"] for x in f.read_text().splitlines()
        )
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_staleness_zero_is_the_synchronous_run(tmp_path, server_run):
    sync = steps_of(server_run.run_dir)  # the synchronous run, shared with test_train_server
    async0 = steps_of(run(tmp_path, "async0", **{"trainer.mode": "async", "trainer.max_staleness": 0}))
    assert len(sync) == len(async0) == 3
    for want, got in zip(sync, async0, strict=True):
        for key, value in want.items():
            if not key.startswith(VOLATILE):
                assert got[key] == value, key
        assert got["async/staleness/max"] == 0.0


@pytest.mark.timeout(600)
def test_overlap_within_the_bound_and_resume_loses_and_repeats_nothing(tmp_path):
    extra = {"trainer.mode": "async", "trainer.max_staleness": 2, "trainer.save_freq": 1}  # 2 updates a step
    whole = run(tmp_path, "whole", **extra)
    steps = steps_of(whole)
    for s in steps:  # within the bound, nothing dropped
        assert s["async/staleness/max"] <= 1.0 and s["rollout/policy_lag/max"] <= 1.0
        assert s["async/dropped_stale"] == 0
        # queue health: a share of the step, samples per second of generation, an age in the queue
        assert 0.0 <= s["async/trainer_idle_share"] <= 1.0
        assert s["async/gen_samples_per_s"] > 0.0 and s["async/sample_age_s"] >= 0.0
    # step 1 had nothing ahead of it: the trainer waited for its whole rollout
    assert steps[0]["async/trainer_idle_share"] > 0.0
    # step 2's batch was sampled by version 0 while step 1 trained (version 0 -> 1): one behind
    assert steps[1]["rollout/policy_version/max"] == 0.0 and steps[1]["async/staleness/max"] == 1.0
    assert steps[1]["async/staleness_updates/max"] == 2.0  # one step of 2 mini-batch updates
    # the engine's log-probs are still compared with the trainer's: the gap is the staleness
    assert steps[1]["rollout_corr/abs_diff_max"] > 0.0
    # the same run, stopped right after the checkpoint of step 1: its later checkpoints and logs removed
    part = tmp_path / "part" / "run"
    shutil.copytree(whole, part)
    for later in ("step_2", "step_3"):
        shutil.rmtree(part / "checkpoints" / later)
    for later in ("step_2.jsonl", "step_3.jsonl"):
        (part / "rollouts" / later).unlink()
    (part / "checkpoints" / "latest").write_text("step_1")  # as a crash right after that save leaves it
    state = json.loads((part / "checkpoints" / "step_1" / "trainer_state.json").read_text())
    assert state["buffered_rollouts"] >= 1  # step 2's rollout was generating or ready at the save
    resumed = Trainer(load_config(None, tiny_overrides(tmp_path / "part", **{
        "rollout.engine": "server", "trainer.total_training_steps": 3, "trainer.rollout_dump_freq": 1, **extra,
    }))).fit()  # fmt: skip
    assert prompts_per_step(resumed) == prompts_per_step(whole)
    again = [r for r in steps_of(resumed) if r["training/global_step"] == 2]
    assert again[-1]["async/regenerated_on_resume"] == state["buffered_rollouts"]


@pytest.mark.timeout(600)
def test_agent_episodes_stream_in_async_mode(tmp_path):
    recipe = Path(__file__).parents[2] / "examples" / "calculator_agent.yaml"
    overrides = {
        "model.path": "tiny-random",
        "rollout.engine": "server",
        "trainer.mode": "async",
        "trainer.max_staleness": 2,  # one step of 2 mini-batches
        "data.train_batch_size": 2,
        "data.max_response_length": 24,
        "rollout.n": 2,
        "rollout.multi_turn.max_tokens_per_turn": 8,
        "actor.ppo_mini_batch_size": 1,
        "trainer.total_training_steps": 3,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
    }
    trainer = Trainer(load_config(recipe, [f"{k}={v}" for k, v in overrides.items()]))
    assert trainer.rollout.streaming and trainer.sampler.params(1).seed is None
    trainer.val_examples = trainer.val_examples[:4]
    steps = steps_of(trainer.fit())
    assert len(steps) == 3
    for s in steps:
        assert s["async/staleness/max"] <= 1.0
        assert s["response_length/mean"] == pytest.approx(s["agent/model_tokens/mean"])
