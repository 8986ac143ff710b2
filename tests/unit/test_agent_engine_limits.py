"""HFEngine's optional per-row token limits (used by agent turns) leave its default behaviour unchanged."""

import pytest

from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine


def test_per_row_limits(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=4)
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    p = SamplingParams(max_new_tokens=12, n=2, temperature=1.0, seed=7)
    plain = engine.generate(prompts, p)
    same = engine.generate(prompts, p, max_new_tokens_per_row=[12] * 6)
    assert plain == same  # uniform limits equal to max_new_tokens: identical samples, log-probs, reasons
    limits = [3, 12, 1, 7, 12, 5]
    cut = engine.generate(prompts, p, max_new_tokens_per_row=limits)
    for ids, lps, reason, limit in zip(
        cut.response_ids, cut.log_probs, cut.finish_reasons, limits, strict=True
    ):
        assert len(ids) == len(lps) <= limit
        assert reason == "stop" or len(ids) == limit
    assert any(len(ids) == 1 for ids in cut.response_ids[2:3])
    with pytest.raises(ValueError, match="needs 6 values >= 1"):
        engine.generate(prompts, p, max_new_tokens_per_row=[1, 2])
    with pytest.raises(ValueError, match="needs 6 values >= 1"):
        engine.generate(prompts, p, max_new_tokens_per_row=[0] * 6)
