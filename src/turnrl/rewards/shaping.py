"""Reward shaping that depends on length: DAPO's overlong penalty (Yu et al. 2025, eq. 13)."""

from __future__ import annotations

import torch


def overlong_penalty(model_tokens: torch.Tensor, max_length: int, buffer: int, factor: float) -> torch.Tensor:
    """0 up to `max_length - buffer` tokens, then falling linearly to `-factor` at `max_length`.

    `model_tokens` counts the policy's own tokens only: tool observations inside a
    multi-turn response are not the policy's verbosity and are never penalised.
    """
    expected = max_length - buffer
    over = (model_tokens.float() - expected).clamp(min=0)
    return -(over / buffer * factor).clamp(max=factor)
