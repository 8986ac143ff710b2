"""A run stopped after a checkpoint and resumed ends exactly where an uninterrupted run ends."""

import pytest
import torch

from tests.support.tiny_runs import metrics, policy, same_metrics, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer


@pytest.mark.slow  # the default run keeps the every-role resume and test_exact_resume's SIGKILL test
@pytest.mark.timeout(300)
def test_resume_matches_uninterrupted_run(tmp_path):
    # 4 prompts, batch 2 -> 2 steps per epoch: stopping at step 2 stops at an epoch boundary,
    # where resuming once ran 0 steps (verl PR #5725)
    common = {"data.train_batch_size": 2, "actor.ppo_mini_batch_size": 1, "actor.optim.lr_warmup_steps": 3}
    straight = Trainer(
        load_config(None, tiny_overrides(tmp_path / "a", **common, **{"trainer.total_training_steps": 3}))
    )
    straight.loader.examples = straight.loader.examples[:4]
    straight.fit()

    first = Trainer(
        load_config(None, tiny_overrides(tmp_path / "b", **common, **{"trainer.total_training_steps": 2}))
    )
    first.loader.examples = first.loader.examples[:4]
    first.fit()
    resumed = Trainer(
        load_config(None, tiny_overrides(tmp_path / "b", **common, **{"trainer.total_training_steps": 3}))
    )
    resumed.loader.examples = resumed.loader.examples[:4]
    # saved at the very end of epoch 0: resuming must move on to epoch 1, not stop
    assert resumed.state.global_step == 2 and (resumed.loader.epoch, resumed.loader.position) == (0, 2)
    resumed.fit()

    same_metrics(straight, resumed, range(3, 4))  # the warm-up schedule did not restart, and more
    for (name, p), q in zip(policy(straight).named_parameters(), policy(resumed).parameters(), strict=True):
        assert torch.equal(p, q), name


def run_in_two_parts(tmp_path, overrides: dict, total: int, stop: int) -> tuple[Trainer, Trainer]:
    """(the uninterrupted run, the run stopped after `stop` steps and resumed to `total`)."""

    def make(where: str, steps: int) -> Trainer:
        extra = {**overrides, "trainer.total_training_steps": steps}
        trainer = Trainer(load_config(None, tiny_overrides(tmp_path / where, **extra)))
        trainer.loader.examples = trainer.loader.examples[:8]
        return trainer

    straight = make("a", total)
    straight.fit()
    make("b", stop).fit()
    resumed = make("b", total)
    assert resumed.state.global_step == stop
    resumed.fit()
    return straight, resumed


@pytest.mark.slow  # ~15-50 s: the default run stays under 10 minutes on 2 cores
@pytest.mark.timeout(400)
def test_resume_restores_every_role_ppo_with_critic_reference_and_kl(tmp_path):
    # critic warm-up, KL in the reward AND as a loss: after the resume the reference must still be
    # the start policy (not the resumed actor), the critic its trained self, the KL coefficient and
    # the policy version where they were
    overrides = {
        "algorithm.adv_estimator": "gae",
        "algorithm.lam": 0.95,
        "algorithm.use_kl_in_reward": True,
        "algorithm.kl_ctrl.type": "adaptive",
        "actor.use_kl_loss": True,
        "critic.enable": True,
        "critic.ppo_mini_batch_size": 2,
        "critic.optim.lr_warmup_steps": 2,
        "trainer.critic_warmup": 1,
        "trainer.save_freq": 2,
        "rollout.n": 4,
    }
    straight, resumed = run_in_two_parts(tmp_path, overrides, total=4, stop=2)
    same_metrics(straight, resumed, range(3, 5))
    last = next(m for m in metrics(resumed.run_dir) if m["step"] == 4 and "critic/score/mean" in m)
    assert last["actor/kl_loss"] > 0 and last["critic/kl"] > 0  # the reference differs from the policy
    assert last["rollout/policy_version/max"] == 2  # steps 2 and 3 updated the actor (step 1 warmed up)
    for a, b in zip(policy(straight).parameters(), policy(resumed).parameters(), strict=True):
        assert torch.equal(a, b)
    critic_a, critic_b = straight.critic.group.workers[0].model, resumed.critic.group.workers[0].model
    for a, b in zip(critic_a.parameters(), critic_b.parameters(), strict=True):
        assert torch.equal(a, b)
    ckpt = resumed.run_dir / "checkpoints" / "step_4"
    assert {p.name for p in ckpt.iterdir()} == {
        "actor",
        "critic",
        "reference",
        "trainer_state.json",
        "manifest.json",
    }


@pytest.mark.slow  # the default run keeps the every-role resume and test_exact_resume's SIGKILL test
@pytest.mark.timeout(300)
def test_resume_with_lora_where_the_actor_serves_the_reference(tmp_path):
    overrides = {"model.lora_rank": 4, "actor.use_kl_loss": True, "trainer.save_freq": 1, "rollout.n": 4}
    straight, resumed = run_in_two_parts(tmp_path, overrides, total=3, stop=1)
    same_metrics(straight, resumed, range(2, 4))
    # no second copy of the model: the reference group is the actor's
    assert resumed.ref is not None and resumed.ref.group is resumed.actor.group
    ckpt = resumed.run_dir / "checkpoints" / "step_3"
    assert {p.name for p in ckpt.iterdir()} == {"actor", "trainer_state.json", "manifest.json"}
