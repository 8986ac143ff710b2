"""The last step's checkpoint is written before the final validation: a validation that dies (out of
memory, killed) loses no training, and the run resumed from there validates and stops."""

import pytest

from tests.support.tiny_runs import read_metrics, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer import checkpoint
from turnrl.trainer.ppo import Trainer


@pytest.mark.timeout(300)
def test_a_final_validation_that_dies_loses_no_training(tmp_path, monkeypatch):
    overrides = tiny_overrides(tmp_path, **{"trainer.total_training_steps": 2, "trainer.save_freq": 0})
    trainer = Trainer(load_config(None, overrides))
    run = trainer.run_dir

    def dies() -> dict[str, float]:
        raise MemoryError("the final validation ran out of memory")

    monkeypatch.setattr(trainer, "validate", dies)
    with pytest.raises(MemoryError):
        trainer.fit()
    assert sorted(checkpoint.steps(run)) == [2]  # both steps' training is on disk

    resumed = Trainer(load_config(None, overrides))
    assert resumed.state.global_step == 2 and resumed.state.validated_step != 2
    resumed.fit()  # trains nothing more: validates step 2, then records that it did
    logged = read_metrics(run)
    assert [r["step"] for r in logged if "actor/pg_loss" in r] == [1, 2]
    assert [r["step"] for r in logged if "val/test_score/mean" in r] == [2]

    again = Trainer(load_config(None, overrides))
    assert again.state.validated_step == 2  # resuming the finished run would not validate again
    again.close()
