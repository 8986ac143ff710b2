"""A forward that carries a KV cache under `cache_name`'s keyword is the forward without one, and
transformers does not warn about the cache's name (5.x renamed `past_key_values` to `cache`)."""

import logging

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from turnrl.models.cache_name import CACHE_NAME, cache_kw, cache_of


def test_the_name_is_the_one_this_transformers_returns():
    assert CACHE_NAME in CausalLMOutputWithPast.__dataclass_fields__


def test_decoding_through_the_cache_matches_one_full_forward_without_a_warning(tiny):
    model, _ = tiny
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    full = model(input_ids=ids).logits[0]
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logging.Logger.warning_once.cache_clear()  # transformers' once-only warnings may have fired already
    hf_logger = logging.getLogger("transformers")
    handler = Keep(level=logging.WARNING)
    hf_logger.addHandler(handler)
    try:
        out = model(input_ids=ids[:, :4], use_cache=True)
        steps = [out.logits[0, -1]]
        for t in range(4, 6):  # two decode steps, one token each
            out = model(input_ids=ids[:, t : t + 1], **cache_kw(cache_of(out)), use_cache=True)
            steps.append(out.logits[0, -1])
    finally:
        hf_logger.removeHandler(handler)
    assert torch.allclose(torch.stack(steps), full[3:], atol=1e-5)
    assert not [m for m in seen if "past_key_values" in m]
