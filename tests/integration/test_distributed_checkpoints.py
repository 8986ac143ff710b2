"""Checkpoints across world sizes: written by 2 ranks, resumed on 1, and the other way round,
continuing with the metrics of the uninterrupted run; `turnrl export` reads a 2-rank checkpoint.

N ranks write shards of the weights and Adam moments (torch.distributed.checkpoint), which any
number of ranks re-shards on load; one process writes a single safetensors file, which any number
of ranks reads whole.
"""

import json
from pathlib import Path

import pytest
import torch

from tests.support.ranks import PPO, WEIGHT_TOL
from tests.support.tiny_runs import assert_same_weights, role_weights, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

pytest.importorskip("ray")


def train(run_dir: Path, ranks: int, steps: int, **extra: object) -> list[dict]:
    overrides = {**PPO, "trainer.save_freq": 1, "trainer.device": "cpu", **extra}
    overrides.update({"trainer.n_gpus_per_node": ranks, "trainer.total_training_steps": steps})
    Trainer(load_config(None, tiny_overrides(run_dir, **overrides))).fit()
    rows = [json.loads(x) for x in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r]


def step3(rows: list[dict]) -> dict:
    return next(r for r in rows if r["step"] == 3)


KEYS = (
    "critic/score/mean",
    "actor/pg_loss",
    "actor/grad_norm",
    "critic/vf_loss",
    "critic/grad_norm",
    "actor/lr",
)


@pytest.mark.slow  # ~2.5 min on 2 cores: run with -m slow
@pytest.mark.timeout(900)
def test_two_ranks_to_one_and_one_to_two(tmp_path):
    straight = step3(train(tmp_path / "a", 1, 3))
    for first, then, name in ((2, 1, "two_to_one"), (1, 2, "one_to_two")):
        train(tmp_path / name, first, 2)
        resumed = step3(train(tmp_path / name, then, 3))
        for k in KEYS:
            assert resumed[k] == pytest.approx(straight[k], abs=1e-5, rel=1e-5), (name, k)
        final = Path("run") / "checkpoints" / "step_3" / "actor"
        assert_same_weights(tmp_path / "a" / final, tmp_path / name / final, WEIGHT_TOL)

    # the 2-rank checkpoint of step 2 exports to a plain Hugging Face directory
    from transformers import AutoModelForCausalLM

    from turnrl.export import export

    out = export(tmp_path / "two_to_one" / "run", tmp_path / "export", step=2)
    model = AutoModelForCausalLM.from_pretrained(out)
    step2 = tmp_path / "two_to_one" / "run" / "checkpoints" / "step_2" / "actor"
    assert (step2 / "shards").is_dir()  # written by 2 ranks
    saved = role_weights(step2)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(model.state_dict()[name], saved[name])
