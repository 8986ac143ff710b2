"""A run stopped after a checkpoint and resumed ends exactly where an uninterrupted run ends."""

import json

import pytest
import torch

from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

from .test_train_tiny import tiny_overrides


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


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
    assert resumed.global_step == 2 and (resumed.loader.epoch, resumed.loader.position) == (0, 2)
    resumed.fit()

    a = next(m for m in metrics(straight.run_dir) if m["step"] == 3 and "critic/score/mean" in m)
    b = next(m for m in metrics(resumed.run_dir) if m["step"] == 3 and "critic/score/mean" in m)
    assert a["actor/lr"] == b["actor/lr"]  # the warm-up schedule did not restart
    assert a["critic/score/mean"] == b["critic/score/mean"]
    assert a["actor/pg_loss"] == pytest.approx(b["actor/pg_loss"], abs=1e-6)
    for (name, p), q in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), name
