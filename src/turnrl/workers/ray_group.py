"""Worker groups on Ray: one actor process per rank, `torch.distributed` inside each.

    pool = RayPool(cfg)                                  # joins or starts Ray, reserves one bundle per rank
    actor = ActorHandle(RayGroup(pool, "actor", partial(Actor, cfg.actor, ...), seed))
    actor.compute_log_prob(batch)                        # the same call as over a LocalGroup

Placement follows the seeds' resource pools: one placement group with a bundle per rank
(`trainer.nnodes` x `trainer.n_gpus_per_node`; a GPU each, or a CPU each with
`trainer.device=cpu`; one per node when `trainer.n_gpus_per_node=1` and `trainer.nnodes` > 1),
and every role puts its rank r into bundle r with a fraction of it, so
actor, reference and critic are colocated on the same devices. Each role's ranks form their own
process group (gloo on CPU, NCCL on GPU) and build their own model (FSDP2-sharded inside).

A rank that raises or dies ends the run at once: the pool kills every rank of every role (the
others would wait forever in a collective), frees its bundles, stops or disconnects the Ray it
started or joined, and the call raises `RankError` naming the role, the rank and its error. A
pool that fails to start cleans up the same way, so the next run in the process starts afresh.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from turnrl.batch import Batch
from turnrl.config.schema import Config
from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.workers.dispatch import group_rows, imbalance, shard_rows
from turnrl.workers.group import Group
from turnrl.workers.roles import ActorRole

COLLECTIVE_TIMEOUT_S = 600  # a collective that waits this long has lost a peer
CONNECT_TIMEOUT_S = 10  # ray.init retries an address that does not answer for minutes
DEATH_GRACE_S = 5.0  # how long a peer's collective error waits for the death that caused it


class RankError(RuntimeError):
    """A rank of a worker group raised or died; the message names the role, the rank and the error."""


class DistributedSetupError(TurnrlInputError):
    """Ray or the process groups could not start; the message names the setting to fix."""


class RankInputError(RankError, TurnrlInputError):
    """A rank rejected its input (a checkpoint, a model file): reported in one line, as in one process."""


class RankWorker:
    """The process of one rank: joins the role's process group, builds the role, runs its methods."""

    def address(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def init(self, rank: int, world: int, master: tuple[str, int], device: str, threads: int) -> int:
        import torch
        import torch.distributed as dist

        os.environ.update(
            MASTER_ADDR=master[0], MASTER_PORT=str(master[1]), RANK=str(rank), WORLD_SIZE=str(world)
        )
        if device == "cpu":
            torch.set_num_threads(threads)
        backend = "nccl" if device == "cuda" else "gloo"
        dist.init_process_group(
            backend, rank=rank, world_size=world, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        )
        return os.getpid()

    def build(self, factory: Callable[[], Any], seed: int, deterministic: bool = False) -> None:
        from turnrl.runtime import seed_everything

        seed_everything(seed, deterministic)  # as the single process does before it builds its roles
        self.role = factory()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.role, method)(*args, **kwargs)


class RayPool:
    """The run's Ray connection and its bundles: one per data-parallel rank."""

    def __init__(self, cfg: Config):
        t = cfg.trainer
        self.world, self.nnodes = t.nnodes * t.n_gpus_per_node, t.nnodes
        self.device = "cuda" if t.device in ("auto", "cuda") and _has_cuda() else "cpu"
        if t.device == "cuda" and self.device != "cuda":
            raise DistributedSetupError("trainer.device=cuda but this machine has no CUDA device")
        self.groups: list[RayGroup] = []
        self.pg: Any = None
        self.owns_ray = not ray.is_initialized()  # started or joined here: stopped or left on close
        if self.owns_ray:
            _init_ray(t.ray_address)
        try:
            self._place()
        except BaseException:
            self.close()
            raise
        self.threads = max(1, (os.cpu_count() or 1) // t.n_gpus_per_node)
        self.share = 1.0  # the fraction of a bundle each role takes; set by `reserve`

    def _place(self) -> None:
        per_rank = {"GPU": 1.0, "CPU": 1.0} if self.device == "cuda" else {"CPU": 1.0}
        have = ray.cluster_resources()
        for key, need in per_rank.items():
            if have.get(key, 0.0) < need * self.world:
                raise DistributedSetupError(
                    f"trainer.nnodes x trainer.n_gpus_per_node = {self.world} ranks need {need * self.world:g} "
                    f"{key} but the Ray cluster has {have.get(key, 0.0):g}; lower trainer.n_gpus_per_node"
                )
        # one rank per node: STRICT_SPREAD puts each bundle on a node of its own (PACK would fill the
        # first node that has room); several ranks per node: PACK, their devices fill the nodes
        spread = self.nnodes > 1 and self.world == self.nnodes
        self.pg = placement_group(
            [dict(per_rank) for _ in range(self.world)], strategy="STRICT_SPREAD" if spread else "PACK"
        )
        ready, _ = ray.wait([self.pg.ready()], timeout=120)
        if not ready:
            raise DistributedSetupError(
                f"Ray could not place {self.world} ranks ({per_rank} each) within 120 s; "
                "check trainer.nnodes / trainer.n_gpus_per_node against `ray status`"
            )

    def reserve(self, roles: int) -> None:
        """Colocate `roles` roles in every bundle."""
        self.share = 1.0 / max(roles, 1)

    def close(self) -> None:
        """End every rank of every role, free the bundles, stop (or leave) the Ray of `__init__`.
        Safe to call again: a failed call closes the pool before the driver's own cleanup runs."""
        for group in self.groups:
            group.close()
        self.groups = []
        if self.pg is not None and ray.is_initialized():
            remove_placement_group(self.pg)
        self.pg = None
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()
        self.owns_ray = False


class RayGroup(Group):
    """A role on `pool.world` ranks behind the `WorkerGroup` interface."""

    def __init__(
        self,
        pool: RayPool,
        role: str,
        factory: Callable[[], Any],
        seed: int,
        balance: bool = True,
        deterministic: bool = False,
    ):
        self.role, self.world_size, self.balance, self.pool = role, pool.world, balance, pool
        self.workers: list[Any] = []
        self.pids: list[int] = []
        pool.groups.append(self)  # before any rank starts: a failure below ends them all
        self.role_cls = factory.func if hasattr(factory, "func") else type(None)  # type: ignore[attr-defined]
        self.stats: list[tuple[float, float]] = []
        cls = ray.remote(RankWorker)
        self.workers = [
            cls.options(
                num_cpus=pool.share,
                num_gpus=pool.share if pool.device == "cuda" else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pool.pg, placement_group_bundle_index=r
                ),
                name=None,
            ).remote()
            for r in range(self.world_size)
        ]
        master = self._get([self.workers[0].address.remote()])[0]
        self.pids = self._get(
            [
                w.init.remote(r, self.world_size, master, pool.device, pool.threads)
                for r, w in enumerate(self.workers)
            ]
        )
        self._get([w.build.remote(factory, seed, deterministic) for w in self.workers])

    def _method(self, method: str) -> Any:
        return getattr(self.role_cls, method, None)

    def _run(self, method: str, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        return self._get(
            [w.call.remote(method, *a, **kw) for w, (a, kw) in zip(self.workers, calls, strict=True)]
        )

    def _shards(self, batch: Batch) -> list[list[int]]:
        """Whole uid groups per rank: balanced by tokens, or contiguous (the 'before' of the metric)."""
        groups = group_rows(batch["uid"]) if "uid" in batch else [[i] for i in range(len(batch))]
        per = -(-len(groups) // self.world_size)
        plain = [[r for g in groups[k * per : (k + 1) * per] for r in g] for k in range(self.world_size)]
        if not self.balance or "attention_mask" not in batch:
            return plain
        balanced = shard_rows(batch, self.world_size)
        self.stats.append((imbalance(batch, plain), imbalance(batch, balanced)))
        return balanced

    def dispatch_metrics(self) -> dict[str, float]:
        """Tokens of the fullest rank over the mean, before and after balancing (since last asked)."""
        if not self.stats:
            return {}
        before = max(s[0] for s in self.stats)
        after = max(s[1] for s in self.stats)
        self.stats.clear()
        return {
            f"balance/{self.role}/imbalance_before": before,
            f"balance/{self.role}/imbalance_after": after,
        }

    def _get(self, refs: list[Any]) -> list[Any]:
        """Results of every rank; the first rank to fail ends the run (no waiting on the others)."""
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except Exception as err:  # the rank's own exception, or its death
                rank, err = _culprit(refs, pending, refs.index(done[0]), err)
                self.pool.close()  # the ranks' process groups are broken: nothing of the run can go on
                raise rank_error(self.role, rank, self.pids[rank] if self.pids else None, err) from err
        return ray.get(refs)

    def close(self) -> None:
        if ray.is_initialized():
            for w in self.workers:
                ray.kill(w, no_restart=True)
        self.workers = []


class RemoteEngine:
    """The rollout engine of a remote actor group: rank 0 samples with the full weights."""

    def __init__(self, actor: ActorRole):
        self.actor = actor
        self.eos_ids: set[int] = actor.eos_ids()
        self.max_lag = 0  # the protocol's; rank 0's engine samples one version per batch

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation:
        gen = self.actor.generate(prompt_ids, params, max_new_tokens_per_row)
        assert gen is not None, "rank 0 of the actor group holds the engine"
        return gen

    def sync_weights(self, version: int) -> None:
        self.actor.sync_weights(version)

    def close(self) -> None:
        pass


def _init_ray(address: str) -> None:
    """Join the cluster at `address`, or start a local Ray that counts this machine's real CPUs (so
    more CPU ranks than cores is an error here, not a run that crawls)."""
    if not address:
        ray.init(include_dashboard=False)
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        if port.isdigit():  # "auto" and the like: Ray resolves and answers fast itself
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
        ray.init(address=address, log_to_driver=True)
    except (OSError, RuntimeError, ValueError) as err:  # ConnectionError is an OSError
        ray.shutdown()
        raise DistributedSetupError(
            f"trainer.ray_address={address!r}: no Ray cluster answers ({_one_line(err)})"
        ) from None


def _culprit(refs: list[Any], pending: list[Any], rank: int, err: Exception) -> tuple[int, Exception]:
    """The rank to blame. A rank's death reaches its peers first, as a collective error ('connection
    closed by peer'), and the driver a moment later: wait briefly for a death among the others."""
    if isinstance(err, RayActorError) or not pending:
        return rank, err
    done, _ = ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S)
    for ref in done:
        try:
            ray.get(ref)
        except RayActorError as died:
            return refs.index(ref), died
        except Exception:
            pass  # another rank's own error: the first one stands
    return rank, err


def rank_error(role: str, rank: int, pid: int | None, err: Exception) -> RankError:
    """One line naming the role, the rank and its error; a rank's input error (a bad checkpoint)
    stays an input error, which `turnrl train` prints in one line as it does in one process."""
    where = f"{role} rank {rank}" + (f" (pid {pid})" if pid else "")
    kind = RankInputError if isinstance(getattr(err, "cause", None), TurnrlInputError) else RankError
    return kind(f"{where} failed: {_one_line(err)}")


def _one_line(err: BaseException) -> str:
    """A rank's error in one line: its process's death, or the exception it raised."""
    if isinstance(err, RayActorError):
        return "its process died (killed by a signal, out of memory, or crashed; see the Ray logs)"
    cause = getattr(err, "cause", None)
    if isinstance(err, RayTaskError) and isinstance(cause, BaseException):
        err = cause
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
