"""The inspector's per-stage texts are keyed by exactly the trainer's stage names, in loop order."""

import pytest

from turnrl.inspector.docs import FOCUS, INSPECTOR_STAGES, STAGE_DOCS, stage_doc
from turnrl.trainer.stages import STAGES


def test_stage_docs_are_the_trainer_stages_plus_the_inspectors_own():
    assert INSPECTOR_STAGES == ("after_update", "metrics")
    assert set(STAGE_DOCS) == set(STAGES) | {"after_update", "metrics"}


def test_stage_docs_follow_the_loop_order():
    assert list(STAGE_DOCS) == [*STAGES, *INSPECTOR_STAGES]


def test_focus_names_only_known_stages():
    assert set(FOCUS) <= set(STAGE_DOCS)


def test_a_repeated_stage_shares_its_text_and_an_unknown_one_is_an_error():
    assert stage_doc("gen#2") is STAGE_DOCS["gen"]  # dynamic sampling records a stage per round
    with pytest.raises(KeyError, match="balance"):
        stage_doc("balance")
