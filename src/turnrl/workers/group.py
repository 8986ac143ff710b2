"""The seam between the driver and the roles: dispatch -> call -> collect.

The driver never holds a model. It holds one typed handle per role (`workers/handles.py`,
implementing the role's Protocol of `workers/roles.py`), whose methods are `group.call("name",
...)` on the role's group: `actor.compute_log_prob(batch)` reads like a local call and is
type-checked like one. How a call travels is the group's business and the role method's
declared dispatch mode:

- `@dp` — the method takes a `Batch` first: the group cuts it over its ranks with
  `workers.dispatch.shard_rows` (whole `uid` groups, balanced by tokens), calls every rank
  on its shard, and gathers `Batch` results back in the original row order (other results:
  rank 0's, since a rank's metrics are already reduced over ranks inside the role).
- `@on_all` (the default) — every rank gets the same arguments (save, load, sync, update
  with the whole batch); rank 0's result is returned.

`LocalGroup` runs its workers in this process, one after the other; with one worker (the
default) it is the single-process trainer exactly. A Ray group implements the same
interface with one actor per rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from turnrl.batch import Batch
from turnrl.workers.dispatch import gather, scatter, shard_rows

F = TypeVar("F", bound=Callable[..., Any])
DISPATCH_ATTR = "_turnrl_dispatch"


def dp(fn: F) -> F:
    """Mark a role method whose first argument is a Batch to split over data-parallel ranks."""
    setattr(fn, DISPATCH_ATTR, "dp")
    return fn


def on_all(fn: F) -> F:
    """Mark a role method that every rank runs with the same arguments (the default)."""
    setattr(fn, DISPATCH_ATTR, "all")
    return fn


def dispatch_mode(method: Callable[..., Any]) -> str:
    return getattr(method, DISPATCH_ATTR, "all")


class WorkerGroup(Protocol):
    """What the driver sees of a role: its methods, called on every rank of the group."""

    world_size: int

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def close(self) -> None: ...


class Group:
    """dispatch -> call -> collect, shared by every group; a group says how it runs one call on
    each rank (`_run`), where a role's methods are declared (`_method`) and how it cuts a batch."""

    role: str
    world_size: int
    in_process: bool = False
    """True when the role objects live in this process (the actor's engine can be used directly)."""

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        fn = self._method(method)
        if not callable(fn):
            raise AttributeError(f"role {self.role} has no method '{method}'")
        if dispatch_mode(fn) == "dp" and self.world_size > 1:
            batch, rest = args[0], args[1:]
            if not isinstance(batch, Batch):
                raise TypeError(f"{self.role}.{method} is data-parallel: its first argument must be a Batch")
            shards = self._shards(batch)
            results = self._run(method, [((part, *rest), kwargs) for part in scatter(batch, shards)])
            return gather(results, shards) if all(isinstance(r, Batch) for r in results) else results[0]
        return self._run(method, [(args, kwargs)] * self.world_size)[0]

    def dispatch_metrics(self) -> dict[str, float]:
        """How evenly the last calls loaded the ranks (a group that balances them says)."""
        return {}

    def close(self) -> None:
        raise NotImplementedError

    def _method(self, method: str) -> Any:
        raise NotImplementedError

    def _run(self, method: str, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        """Rank r runs `method(*calls[r][0], **calls[r][1])`; results in rank order."""
        raise NotImplementedError

    def _shards(self, batch: Batch) -> list[list[int]]:
        return shard_rows(batch, self.world_size)


class LocalGroup(Group):
    """Workers in this process, called one after the other."""

    in_process = True

    def __init__(self, workers: list[Any]):
        if not workers:
            raise ValueError("a worker group needs at least one worker")
        self.workers = workers
        self.world_size = len(workers)
        self.role = type(workers[0]).__name__

    def _method(self, method: str) -> Any:
        return getattr(self.workers[0], method, None)

    def _run(self, method: str, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        return [getattr(w, method)(*a, **kw) for w, (a, kw) in zip(self.workers, calls, strict=True)]

    def close(self) -> None:
        for w in self.workers:
            close = getattr(w, "close", None)
            if callable(close):
                close()
