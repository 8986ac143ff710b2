"""The batch's fields are declared once (`turnrl/fields.py`), and writing any other fails in tests."""

from pathlib import Path

import pytest
import torch

from turnrl import fields
from turnrl.batch import Batch
from turnrl.fields import FIELDS, UndeclaredFieldError
from turnrl.trainer.stages import STAGES

# who writes or reads a field besides the loop's stages: a role's result batch, the metrics, the
# rollout dump, validation and `turnrl eval`, the step inspector
COMPONENTS = {"role:actor", "role:reward_model", "metrics", "dump", "validation", "inspector"}


@pytest.fixture
def strict():
    was = fields.strict()
    fields.set_strict(True)
    yield
    fields.set_strict(was)


def test_writing_an_undeclared_field_fails_and_says_where_to_declare_it(strict):
    with pytest.raises(UndeclaredFieldError, match=r"'old_logprobs' is not declared.*src/turnrl/fields.py"):
        Batch(tensors={"old_logprobs": torch.zeros(2, 3)})
    batch = Batch(tensors={"responses": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(UndeclaredFieldError, match="'advantage' is not declared"):
        batch["advantage"] = torch.zeros(2, 3)
    with pytest.raises(UndeclaredFieldError, match="'tag' is not declared"):
        Batch(non_tensors={"tag": ["a", "b"]})
    batch["advantages"] = torch.zeros(2, 3)  # the declared name is fine
    assert "advantages" in batch and "advantage" not in batch


def test_the_test_session_runs_strict():
    assert fields.strict()  # tests/conftest.py turns the check on for every test and every run it starts


def test_every_field_has_a_writer_readers_a_shape_and_a_meaning():
    known = set(STAGES) | COMPONENTS
    for f in FIELDS.values():
        assert f.writers and set(f.writers) <= known, f
        assert f.readers and set(f.readers) <= known, f
        assert f.shape.startswith("(") and f.dtype and f.meaning, f
        assert f.shape.startswith("(B") or f.writers == ("update_actor",), f  # one row per sample


def test_verl_names_are_kept():
    for name in ("old_log_probs", "ref_log_prob", "entropys", "token_level_scores", "token_level_rewards"):
        assert name in FIELDS


@pytest.mark.timeout(300)
def test_a_real_step_writes_only_declared_fields(tmp_path: Path):
    """One traced GRPO step with a KL loss (reference log-probs): every stage's batch, the actor's
    update diagnostics and the inspector's own pass hold declared fields only. The check here runs
    with strict mode off, so it is this test's assertion that catches a stray field."""
    from turnrl.inspector.trace import run_trace

    was = fields.strict()
    fields.set_strict(False)
    try:
        result = run_trace(
            None,
            ["model.path=tiny-random", "data.max_response_length=8", "actor.use_kl_loss=true"],
            tmp_path / "out",
        )
    finally:
        fields.set_strict(was)
    written = {k: r.stage for r in result.records for k in [*r.batch.tensors, *r.batch.non_tensors]}
    undeclared = {k: stage for k, stage in written.items() if k not in FIELDS}
    assert not undeclared, f"stages wrote undeclared fields: {undeclared}"
    for name in ("responses", "response_mask", "old_log_probs", "ref_log_prob", "advantages", "uid"):
        assert name in written  # the step really ran through its stages
