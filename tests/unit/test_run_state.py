"""The run state is saved whole and restored whole; older checkpoints' trainer states still load."""

import json

import pytest

from turnrl.batch import Batch
from turnrl.trainer.producer import Produced, RolloutProducer
from turnrl.trainer.stages import StageClock
from turnrl.trainer.state import RunState


def test_a_saved_state_comes_back_equal_through_json():
    state = RunState(
        global_step=7,
        policy_version=6,
        loader={"epoch": 1, "position": 3, "seed": 1},
        kl_coef=0.0123,
        validated_step=5,
        buffered_rollouts=2,
    )
    assert RunState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_an_older_trainer_state_loads_with_the_values_such_a_run_had():
    # written before the policy version, the validated step and the buffered count were saved
    old = {"global_step": 4, "loader": {"epoch": 0, "position": 4, "seed": 1}, "kl_coef": None}
    state = RunState.from_dict(old)
    assert state.global_step == 4 and state.policy_version == 0 and state.buffered_rollouts == 0
    assert state.validated_step == 4  # such checkpoints were always validated at their step
    assert state.loader == old["loader"]


def test_unknown_keys_of_a_newer_state_are_ignored():
    assert RunState.from_dict({"global_step": 1, "loader": {}, "later_field": 3}).global_step == 1


def _item(step: int) -> Produced:
    return Produced(step, Batch(), {}, {}, {"epoch": 0})


def test_with_no_lead_the_producer_makes_each_step_when_asked_and_buffers_nothing():
    made: list[int] = []

    def produce(step: int) -> Produced:
        made.append(step)
        return _item(step)

    producer = RolloutProducer(produce, 3, 5, max_staleness=0)
    assert producer.thread is None and made == []
    item, _, depth = producer.next()
    assert item.step == 3 and made == [3] and depth == 0 and producer.buffered() == 0
    producer.step_done(3)
    assert producer.next()[0].step == 4 and made == [3, 4]


def test_the_clock_tells_every_hook_and_times_repeats_together():
    class Keep:
        wants_batches = True

        def __init__(self) -> None:
            self.seen: list[tuple[str, bool]] = []

        def record(self, stage, batch, elapsed_s):
            self.seen.append((stage, batch is not None))

    keep = Keep()
    clock = StageClock([keep])
    assert clock.wants_batches and not StageClock().wants_batches
    with clock("gen") as st:
        st.batch = Batch()
    with clock("gen"):
        pass
    assert keep.seen == [("gen", True), ("gen", False)]
    assert set(clock.timing.seconds) == {"gen"} and clock.timing.seconds["gen"] >= 0.0


@pytest.mark.parametrize("lead", [1, 2])
def test_slow_rollouts_are_never_dropped_as_stale(lead):
    """The producer's gate bounds staleness before a batch starts, so the trainer's stale-group
    drop never fires, however slow a batch is to make (a multi-turn batch behind a slow tool): a
    slow batch delays training, it does not starve. Steps 2 and 5 here take 10x the others."""
    import threading
    import time

    import numpy as np
    import torch

    from turnrl.trainer.stages import drop_stale

    trained = {"version": 0}
    lock = threading.Lock()

    def produce(step: int) -> Produced:
        with lock:
            started_at = trained["version"]  # the policy version sampling starts from
        time.sleep(0.2 if step in (2, 5) else 0.02)  # the slow batches
        rows = 4
        batch = Batch(
            {
                "rollout_policy_version": torch.full((rows,), started_at, dtype=torch.long),
                "uid": np.array([str(step * 10 + i // 2) for i in range(rows)], dtype=object),
            }
        )
        return Produced(step, batch, {}, {}, {"epoch": 0})

    producer = RolloutProducer(produce, 1, 8, max_staleness=lead)
    try:
        for step in range(1, 9):
            item, _, _ = producer.next()
            version = step - 1  # one update per step: the trainer's version as it trains step `step`
            kept, dropped = drop_stale(item.batch, version, lead)
            assert dropped == 0 and len(kept) == 4, step
            assert version - int(item.batch["rollout_policy_version"].min()) <= lead
            with lock:
                trained["version"] = step
            producer.step_done(step)
    finally:
        producer.close()
