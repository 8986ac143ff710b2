"""One agent episode as it grows: response ids, which of them the model wrote, and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Episode:
    prompt: list[int]
    ids: list[int] = field(default_factory=list)
    """The response so far: model tokens and observation tokens, in order."""
    mask: list[int] = field(default_factory=list)
    """1 where the model generated the token, 0 for observation tokens."""
    log_probs: list[float] = field(default_factory=list)
    """Rollout log-prob of each model token; 0 on observation tokens."""
    turns: int = 0
    tool_calls: int = 0
    valid_actions: int = 0
    invalid_actions: int = 0
    tool_errors: int = 0
    obs_cut: int = 0
    done: bool = False
    truncated: bool = False
    """Ended by the response budget, not by the model: `finish_reason` 'length'."""
    answered: bool = False
    versions: list[int] = field(default_factory=list)
    """Per response token, the policy version that sampled it (observation tokens: the turn before's)."""
    row: dict[str, Any] = field(default_factory=dict)
    """The dataset row's own fields (`ground_truth`, `extra_info`, ...), where step rewards read them."""
    turn_rewards: list[float] = field(default_factory=list)
    """One step reward per model turn (a maximal run of model tokens), 0.0 until a tool rewards it."""
    step_memo: dict[str, Any] = field(default_factory=dict)
    """What the tools' step rewards remember across the episode's turns (evidence already found)."""
    workspace: Any = None
    """The episode's sandbox session (a task that brings a workspace); None: none."""

    @property
    def context(self) -> list[int]:
        """What the model conditions on next: prompt, then everything appended so far."""
        return self.prompt + self.ids

    def remaining(self, budget: int) -> int:
        return budget - len(self.ids)

    def add_model(self, ids: list[int], log_probs: list[float], version: int = 0) -> None:
        if len(ids) != len(log_probs):
            raise ValueError(f"{len(ids)} generated ids but {len(log_probs)} log-probs")
        if ids and not (self.mask and self.mask[-1]):  # a new run of model tokens: a new turn
            self.turn_rewards.append(0.0)
        self.ids += ids
        self.mask += [1] * len(ids)
        self.log_probs += log_probs
        self.versions += [version] * len(ids)

    def add_observation(self, ids: list[int]) -> None:
        self.ids += ids
        self.mask += [0] * len(ids)
        self.log_probs += [0.0] * len(ids)
        self.versions += [self.versions[-1] if self.versions else 0] * len(ids)

    def reward_turn(self, reward: float) -> None:
        """Set the step reward of the latest model turn."""
        if self.turn_rewards:
            self.turn_rewards[-1] = reward

    def end(self, truncated: bool = False) -> None:
        self.done = True
        self.truncated = truncated

    @property
    def finish_reason(self) -> str:
        return "length" if self.truncated else "stop"

    @property
    def model_tokens(self) -> int:
        return sum(self.mask)

    @property
    def obs_tokens(self) -> int:
        return len(self.mask) - sum(self.mask)
