"""`RunState`: the driver's counters, the one thing besides the roles' own state a resume needs.

It is saved whole (`trainer_state.json` in a checkpoint) and restored whole: a counter added here is
saved and restored without another line in the loop. The roles (models, optimizers) save their own
state next to it (`checkpoint.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunState:
    """Where a run stands after its last trained step."""

    global_step: int = 0
    """The last trained step (1-based; 0: none yet)."""
    policy_version: int = 0
    """+1 per actor update; every sample records the version that sampled it, and a resumed engine
    takes this version's weights."""
    loader: dict[str, Any] = field(default_factory=dict)
    """The data loader's position after the prompts of the last *trained* step. In async mode the
    loader runs ahead; rollouts still buffered at a save are regenerated on resume, never lost and
    never trained twice."""
    kl_coef: float | None = None
    """The adaptive KL controller's coefficient (None: no KL in the reward)."""
    validated_step: int = -1
    """The step of the last validation logged (-1: none yet): a run resumed after its last step's
    checkpoint validates once, not twice."""
    buffered_rollouts: int = 0
    """In a saved state: rollouts generated or started but not trained at the save. In the live
    state: those of the checkpoint this run resumed from, until the first step reports them
    (`async/regenerated_on_resume`), then 0."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> RunState:
        """A saved state, including those of older checkpoints: a field they lack takes the value
        such a run had (they were always validated at their step; unknown keys are ignored)."""
        known = {f.name for f in dataclasses.fields(cls)}
        state = cls(**{k: v for k, v in saved.items() if k in known})
        if "validated_step" not in saved:
            state.validated_step = state.global_step
        for name in ("global_step", "policy_version", "validated_step", "buffered_rollouts"):
            setattr(state, name, int(getattr(state, name)))
        return state


__all__ = ["RunState"]
