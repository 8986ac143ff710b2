"""Two data-parallel ranks (Ray actors, gloo, FSDP2) compute what one process computes.

Same model, global batch, seed and learnable reward; the 2-rank run splits every mini-batch
into whole uid groups balanced by tokens, sums its per-rank losses over the global token
count, and samples on rank 0 from a full copy of the weights. Losses and gradient norms must agree
to float rounding (1e-5), the weights after the update to a twentieth of one Adam step
(tests/support/ranks.py's WEIGHT_TOL: how far rounding moves them depends on the processor).
"""

import json
from pathlib import Path

import pytest

from tests.support.ranks import GRPO, PPO, WEIGHT_TOL, assert_same
from tests.support.tiny_runs import assert_same_weights, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

pytest.importorskip("ray")


def run(tmp_path: Path, ranks: int, extra: dict, steps: int = 2) -> tuple[list[dict], Path]:
    overrides = {**extra, "trainer.total_training_steps": steps, "trainer.device": "cpu"}
    overrides["trainer.n_gpus_per_node"] = ranks
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path / f"r{ranks}", **overrides)))
    run_dir = trainer.fit()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r], run_dir / "checkpoints" / f"step_{steps}"


@pytest.mark.slow  # 2 ranks of Ray actors: minutes on a loaded 2-core machine (-m slow runs it)
@pytest.mark.timeout(600)
def test_grpo_two_ranks_equal_one(tmp_path):
    one, ckpt1 = run(tmp_path, 1, GRPO)
    two, ckpt2 = run(tmp_path, 2, GRPO)
    assert one[0]["actor/grad_norm"] > 0  # the reward moves the policy: not a trivial comparison
    assert_same(one, two, ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"))
    assert_same_weights(ckpt1 / "actor", ckpt2 / "actor", WEIGHT_TOL)
    assert two[0]["balance/actor/imbalance_after"] <= two[0]["balance/actor/imbalance_before"]


@pytest.mark.slow  # actor, critic and reference on 2 ranks: ~60 s alone, minutes on a loaded machine
@pytest.mark.timeout(600)
def test_ppo_gae_two_ranks_equal_one(tmp_path):  # with token-budget micro-batches
    one, ckpt1 = run(tmp_path, 1, PPO)
    two, ckpt2 = run(tmp_path, 2, PPO)
    keys = ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm", "critic/kl")
    assert_same(one, two, keys)
    assert_same_weights(ckpt1 / "actor", ckpt2 / "actor", WEIGHT_TOL)
    assert_same_weights(ckpt1 / "critic", ckpt2 / "critic", WEIGHT_TOL)
    # 2 ranks wrote shards (weights and Adam moments), one process a single file
    assert (ckpt2 / "critic" / "shards").is_dir() and not (ckpt2 / "critic" / "weights.safetensors").exists()
    assert len(list((ckpt2 / "actor" / "shards").glob("*.distcp"))) == 2


@pytest.mark.slow  # the default run keeps the GRPO and PPO equivalence tests
@pytest.mark.timeout(600)
def test_lora_and_gradient_checkpointing_two_ranks_equal_one(tmp_path):
    # LoRA adapters sharded with their blocks; the reference is the actor with adapters off
    extra = {
        **GRPO,
        "model.lora_rank": 8,
        "model.gradient_checkpointing": True,
        "actor.use_kl_loss": True,
    }
    one, ckpt1 = run(tmp_path, 1, extra)
    two, ckpt2 = run(tmp_path, 2, extra)
    assert_same(one, two, ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss"))
    assert one[-1]["actor/kl_loss"] > 0  # the adapters moved the policy away from the reference
    assert_same_weights(ckpt1 / "actor", ckpt2 / "actor", WEIGHT_TOL)


@pytest.mark.slow
def test_one_rank_never_imports_ray(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from turnrl.config import load_config\n"
        "from turnrl.trainer.ppo import Trainer\n"
        f"t = Trainer(load_config(None, {tiny_overrides(tmp_path, **{'trainer.total_training_steps': 1})!r}))\n"
        "t.fit()\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
