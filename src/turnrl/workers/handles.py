"""The driver's typed handle of each role: the role's Protocol, implemented over a worker group.

    actor = ActorHandle(LocalGroup([Actor(...)]))      # or over a RayGroup: the same calls
    metrics, _ = actor.update(batch, step=3)            # checked against ActorRole.update

Each method is one line, `self.call("name", ...)`: the group dispatches it (split a `Batch` over
data-parallel ranks for a `@dp` method, else the same arguments to every rank) and collects the
result. The handle exists so that a reader and a type checker see every call the driver makes
to a role; the group decides how the call travels.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnrl.batch import Batch
from turnrl.rollout.base import Generation, RolloutEngine, SamplingParams
from turnrl.workers.group import Group
from turnrl.workers.roles import ActorRole, CriticRole, ReferenceRole, RewardModelRole, TeacherRole


class RoleHandle:
    """One role's worker group, seen from the driver: save, load, close and the raw `call`."""

    def __init__(self, group: Group):
        self.group = group
        self.world_size: int = group.world_size

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The untyped path under every typed method (and the checkpoint's save/load loop)."""
        return self.group.call(method, *args, **kwargs)

    def save(self, directory: Path) -> None:
        self.call("save", directory)

    def load(self, directory: Path) -> None:
        self.call("load", directory)

    def close(self) -> None:
        self.group.close()

    def dispatch_metrics(self) -> dict[str, float]:
        """How evenly the group's ranks were loaded since last asked (empty in one process)."""
        return self.group.dispatch_metrics()


class ReferenceHandle(RoleHandle, ReferenceRole):
    """The reference group, or the actor's group with LoRA (the actor with its adapters off)."""

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        out: Batch = self.call("compute_ref_log_prob", batch)
        return out


class TeacherHandle(RoleHandle, TeacherRole):
    """The on-policy distillation teacher's group (its own: never the actor's)."""

    def compute_teacher_log_prob(self, batch: Batch) -> Batch:
        out: Batch = self.call("compute_teacher_log_prob", batch)
        return out


class ActorHandle(RoleHandle, ActorRole):
    def rollout_engine(self) -> RolloutEngine:
        """The actor's own engine in this process; over remote ranks, rank 0's through `generate`."""
        if self.group.in_process:
            engine: RolloutEngine = self.call("rollout_engine")
            return engine
        from turnrl.workers.ray_group import RemoteEngine

        return RemoteEngine(self)

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation | None:
        out: Generation | None = self.call("generate", prompt_ids, params, max_new_tokens_per_row)
        return out

    def eos_ids(self) -> set[int]:
        out: set[int] = self.call("eos_ids")
        return out

    def sync_weights(self, version: int) -> None:
        self.call("sync_weights", version)

    def compute_log_prob(self, batch: Batch) -> Batch:
        out: Batch = self.call("compute_log_prob", batch)
        return out

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        out: Batch = self.call("compute_ref_log_prob", batch)
        return out

    def update(
        self, batch: Batch, step: int, diagnostics: bool = False
    ) -> tuple[dict[str, float], Batch | None]:
        out: tuple[dict[str, float], Batch | None] = self.call("update", batch, step, diagnostics)
        return out


class CriticHandle(RoleHandle, CriticRole):
    def compute_values(self, batch: Batch) -> Batch:
        out: Batch = self.call("compute_values", batch)
        return out

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        out: dict[str, float] = self.call("update", batch, step)
        return out


class RewardModelHandle(RoleHandle, RewardModelRole):
    def score(self, batch: Batch) -> Batch:
        out: Batch = self.call("score", batch)
        return out


if TYPE_CHECKING:  # the role classes implement their Protocols: mypy checks it here
    from turnrl.workers.actor import Actor
    from turnrl.workers.critic import Critic
    from turnrl.workers.reference import Reference
    from turnrl.workers.reward_model import RewardModel
    from turnrl.workers.teacher import Teacher

    def _implements(
        actor: Actor, critic: Critic, ref: Reference, rm: RewardModel, teacher: Teacher
    ) -> tuple[ActorRole, ReferenceRole, CriticRole, ReferenceRole, RewardModelRole, TeacherRole]:
        return actor, actor, critic, ref, rm, teacher
