"""The name a transformers model takes and returns its KV cache under.

transformers 5.x renamed `past_key_values` to `cache`, in the forward's keyword and in its output
(`CausalLMOutputWithPast.cache`); the old name still works there but warns, and goes in 5.40.
Older releases know only `past_key_values`. The output dataclass's fields say which one this
install speaks, so every forward that carries a cache passes `**cache_kw(cache)` and reads
`cache_of(out)`, and works on both sides of the rename without a warning.
"""

from __future__ import annotations

from typing import Any

from transformers.modeling_outputs import BaseModelOutputWithPast

CACHE_NAME: str = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
"""`cache` on transformers releases after the rename, `past_key_values` before it."""


def cache_kw(cache: Any) -> dict[str, Any]:
    """The forward keyword argument that hands a model `cache` (None: start a new one)."""
    return {CACHE_NAME: cache}


def cache_of(out: Any) -> Any:
    """The KV cache a forward returned (`use_cache=True`)."""
    return getattr(out, CACHE_NAME)
