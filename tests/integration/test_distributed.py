"""Two data-parallel ranks (Ray actors, gloo, FSDP2) compute what one process computes.

Same model, global batch, seed and learnable reward; the 2-rank run splits every mini-batch
into whole uid groups balanced by tokens, sums its per-rank losses over the global token
count, and samples on rank 0 from a full copy of the weights. Losses, gradient norms and the
weights after the update must agree to float rounding (1e-5).
"""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

from .test_train_tiny import tiny_overrides

pytest.importorskip("ray")

GRPO = {
    "data.train_batch_size": 4,
    "actor.ppo_mini_batch_size": 2,
    "actor.ppo_micro_batch_size": 3,  # uneven micro-batches on each rank
    "rollout.n": 4,
    "trainer.save_freq": 0,
    # Adam turns float-rounding differences of near-zero gradients into steps of up to lr: a
    # moderate lr keeps two honest runs within 1e-5 of each other
    "actor.optim.lr": 1e-3,
    # both runs recompute the old log-probs (one rank would take the engine's): like for like
    "algorithm.rollout_correction.bypass": "false",
}
BUDGET = {"ppo": 220, "forward": 300}  # tokens; a row is ~100 (prompt ~92 + 8): 1-3 rows per pass
PPO = {
    **GRPO,
    "algorithm.adv_estimator": "gae",
    "algorithm.use_kl_in_reward": True,
    "critic.enable": True,
    "critic.ppo_mini_batch_size": 2,
    # every role's passes by token budget: rows sorted by length, each rank its own count of passes
    "data.max_prompt_length": 128,
    "actor.use_dynamic_bsz": True,
    "actor.ppo_max_token_len_per_gpu": BUDGET["ppo"],
    "actor.log_prob_max_token_len_per_gpu": BUDGET["forward"],
    "ref.log_prob_use_dynamic_bsz": True,
    "ref.log_prob_max_token_len_per_gpu": BUDGET["forward"],
    "critic.use_dynamic_bsz": True,
    "critic.ppo_max_token_len_per_gpu": BUDGET["ppo"],
    "critic.forward_max_token_len_per_gpu": BUDGET["forward"],
}


def run(tmp_path: Path, ranks: int, extra: dict, steps: int = 2) -> tuple[list[dict], Path]:
    overrides = {**extra, "trainer.total_training_steps": steps, "trainer.device": "cpu"}
    overrides["trainer.n_gpus_per_node"] = ranks
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path / f"r{ranks}", **overrides)))
    run_dir = trainer.fit()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r], run_dir / "checkpoints" / f"step_{steps}"


def assert_same(one: list[dict], two: list[dict], keys: tuple[str, ...]) -> None:
    for a, b in zip(one, two, strict=True):
        for k in keys:
            assert b[k] == pytest.approx(a[k], abs=1e-5, rel=1e-5), (a["step"], k, a[k], b[k])


def role_weights(role_dir: Path) -> dict[str, torch.Tensor]:
    """A role's saved weights: one file from one rank, shards from N (read back whole here)."""
    if (role_dir / "weights.safetensors").is_file():
        return load_file(str(role_dir / "weights.safetensors"))
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(role_dir / "shards", role_dir.parent / f"{role_dir.name}.pt")
    return torch.load(role_dir.parent / f"{role_dir.name}.pt", weights_only=False)["model"]


def assert_same_weights(one: Path, two: Path) -> None:
    a, b = role_weights(one), role_weights(two)
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= 1e-5, worst


@pytest.mark.slow  # the default run keeps the PPO test (actor, critic and reference on 2 ranks)
@pytest.mark.timeout(600)
def test_grpo_two_ranks_equal_one(tmp_path):
    one, ckpt1 = run(tmp_path, 1, GRPO)
    two, ckpt2 = run(tmp_path, 2, GRPO)
    assert one[0]["actor/grad_norm"] > 0  # the reward moves the policy: not a trivial comparison
    assert_same(one, two, ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"))
    assert_same_weights(ckpt1 / "actor", ckpt2 / "actor")
    assert two[0]["balance/actor/imbalance_after"] <= two[0]["balance/actor/imbalance_before"]


@pytest.mark.timeout(600)
def test_ppo_gae_two_ranks_equal_one(tmp_path):  # with token-budget micro-batches
    one, ckpt1 = run(tmp_path, 1, PPO)
    two, ckpt2 = run(tmp_path, 2, PPO)
    keys = ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm", "critic/kl")
    assert_same(one, two, keys)
    assert_same_weights(ckpt1 / "actor", ckpt2 / "actor")
    assert_same_weights(ckpt1 / "critic", ckpt2 / "critic")
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
    assert_same_weights(ckpt1 / "actor", ckpt2 / "actor")


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
