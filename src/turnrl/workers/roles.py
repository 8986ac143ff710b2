"""What the driver may call on each role, declared once as a `Protocol`.

A role class (`Actor`, `Critic`, `Reference`, `Teacher`, `RewardModel`) implements its Protocol, and so
does the driver's typed handle of the role (`workers/handles.py`), which forwards each call to
the role's worker group. So `actor.update(batch, step)` in the loop is checked by mypy against
`ActorRole.update`, and go-to-definition leads from the loop to the declaration here and on to
the role's method of the same name.

Every argument and result is plain data or a `Batch`: a call may cross a process boundary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from turnrl.batch import Batch
from turnrl.rollout.base import Generation, RolloutEngine, SamplingParams


class Role(Protocol):
    """What every role does: keep its own state in a checkpoint sub-directory, and end."""

    def save(self, directory: Path) -> None:
        """Write the role's state (weights, optimizer, RNG streams) under `directory`."""
        ...

    def load(self, directory: Path) -> None:
        """Read back what `save` wrote, on any number of ranks."""
        ...

    def close(self) -> None:
        """Release what the role started (a server engine's child process)."""
        ...


class ReferenceRole(Role, Protocol):
    """The frozen start policy, for KL terms (the actor itself with LoRA: adapters off)."""

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """`ref_log_prob` (B, T_resp) of the responses under the start policy."""
        ...


class TeacherRole(Role, Protocol):
    """The on-policy distillation teacher: a frozen model with the policy's tokenizer."""

    def compute_teacher_log_prob(self, batch: Batch) -> Batch:
        """`teacher_log_prob` (B, T_resp) of the responses under the teacher, at the rollout temperature."""
        ...


class ActorRole(ReferenceRole, Protocol):
    """The policy: samples (through its rollout engine), scores and trains."""

    def rollout_engine(self) -> RolloutEngine:
        """The engine that samples from this policy (stage `gen`)."""
        ...

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation | None:
        """Rank 0 samples with its engine; other ranks return None."""
        ...

    def eos_ids(self) -> set[int]:
        """The engine's end-of-response token ids (empty on ranks without an engine)."""
        ...

    def sync_weights(self, version: int) -> None:
        """Hand the engine the current weights as policy version `version`."""
        ...

    def compute_log_prob(self, batch: Batch) -> Batch:
        """`log_probs` and `entropys` (B, T_resp) of the responses at the rollout temperature."""
        ...

    def update(
        self, batch: Batch, step: int, diagnostics: bool = False
    ) -> tuple[dict[str, float], Batch | None]:
        """The PPO epochs of one step: metrics, and with `diagnostics` the first micro-batch's
        per-token ratio, clipping and loss."""
        ...


class CriticRole(Role, Protocol):
    """The value model, trained on GAE returns."""

    def compute_values(self, batch: Batch) -> Batch:
        """`values` (B, T_resp): V(s_t) before each response token, zero off the response."""
        ...

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """The value-loss epochs of one step: metrics."""
        ...


class RewardModelRole(Role, Protocol):
    """A sequence classifier scoring prompt + response."""

    def score(self, batch: Batch) -> Batch:
        """`rm_scores` (B,): the score at each sequence's last attended token."""
        ...
