"""Async mode's queue-health numbers, worked by hand."""

import torch

from turnrl.batch import Batch
from turnrl.trainer.metrics import QueueTimes, async_metrics, idle_share


def test_queue_health_by_hand():
    # 4 samples: two sampled by version 3, two by version 2 (one token of version 1); trained at 4
    batch = Batch(
        tensors={
            "rollout_policy_version": torch.tensor([3, 3, 2, 1]),
            "rollout_token_versions": torch.tensor([[3, 3], [3, 3], [2, 2], [1, 2]]),
            "response_mask": torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]]),
        }
    )
    got = async_metrics(
        batch, 4, QueueTimes(trainer_idle_s=1.5, rollout_idle_s=0.25, gen_s=2.0, age_s=3.0), 2, 2
    )
    assert got["async/staleness/mean"] == (1 + 1 + 2 + 3) / 4
    assert got["async/staleness/max"] == 3.0 and got["async/staleness_updates/max"] == 6.0
    # 7 model tokens: lags 1, 1, 1, 2, 2, 3, 2
    assert abs(got["async/token_staleness/mean"] - 12 / 7) < 1e-6  # a float32 mean
    assert got["async/gen_samples_per_s"] == 2.0  # 4 samples in 2 s
    assert (got["async/sample_age_s"], got["async/trainer_idle_s"], got["async/rollout_idle_s"]) == (
        3.0,
        1.5,
        0.25,
    )
    assert got["async/queue_depth"] == 2.0
    assert idle_share(1.5, 6.0) == {"async/trainer_idle_share": 0.25}
    assert idle_share(0.0, 0.0) == {"async/trainer_idle_share": 0.0}
    assert async_metrics(batch, 4, QueueTimes(0.0, 0.0, 0.0, 0.0), 0)["async/gen_samples_per_s"] == 0.0
