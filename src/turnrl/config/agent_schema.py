"""Configuration of multi-turn agent rollouts (`rollout.multi_turn.*`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MultiTurnConfig:
    enable: bool = False
    """Run episodes of generate -> tool call -> observation -> generate instead of one response."""
    max_turns: int = 4
    """Tool-using turns per episode; after the last one the model answers without tools."""
