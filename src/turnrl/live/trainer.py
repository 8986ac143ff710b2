"""The trainer whose rollouts are the clients' sessions: `turnrl live serve`.

It is `turnrl train`'s trainer with stages 1-6 replaced: a step waits for `data.train_batch_size`
ready groups of rewarded sessions (`store.take`) and turns them into the batch
(`rows.group_batch`); stages 7-13 (old log-probs, reference, advantages, update, weight sync) run
unchanged. Around it:

- the engine samples from a copy of the policy (`HFEngine.sample_from_copy`), so serving goes on
  while the trainer updates; new weights are swapped in on the engine's worker between two engine
  calls (`Batcher.call`), never in the middle of one;
- every step is checkpointed, its sessions marked trained on disk just before: a crash before the
  checkpoint is whole loses that update and trains its sessions again, once; after it, they are
  never trained again (`store.replay`);
- validation (held-out rows of `data.task`, `trainer.test_freq`) runs on the engine's worker too:
  it measures the policy being served, and client calls wait for it;
- sessions whose oldest model token is more than `trainer.max_staleness // updates per step`
  versions older than the policy are dropped (`live/dropped/stale`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Any

from turnrl.agent.functions.rollout import with_template
from turnrl.agent.gateway.trajectory import EpisodeLimits
from turnrl.config import Config, ConfigError
from turnrl.config.checks import updates_per_step
from turnrl.live.app import create_app
from turnrl.live.keys import Client
from turnrl.live.rows import group_batch, split_stale
from turnrl.live.server import LiveServer, ScoreFn
from turnrl.live.store import Limits, Session, SessionStore
from turnrl.plugins import load_function
from turnrl.servers.chat.template import ChatTemplate, ChatTemplateError
from turnrl.trainer.ppo import Trainer
from turnrl.trainer.producer import Produced
from turnrl.trainer.stages import StageClock

log = logging.getLogger(__name__)


class Stopped(Exception):
    """The server was asked to stop while the trainer waited for sessions."""


def check_live(cfg: Config) -> None:
    """The rules of a live run, before any model loads; each a line naming the key."""
    lc = cfg.live
    if lc.group_by not in ("prompt", "task"):
        raise ConfigError(f"live.group_by={lc.group_by!r}: use prompt or task")
    if cfg.rollout.engine not in ("hf", "server"):
        raise ConfigError(
            f"rollout.engine={cfg.rollout.engine!r}: turnrl live serve samples with hf or server"
        )
    if cfg.trainer.mode != "sync":
        raise ConfigError("trainer.mode: turnrl live serve trains in its own loop; leave it at sync")
    if cfg.algorithm.rollout_correction.bypass == "true":
        raise ConfigError(
            "algorithm.rollout_correction.bypass=true: live sessions are sampled by older policies; "
            "use mode=tis or mis"
        )


class BetweenCalls:
    """The engine as the trainer sees it: `sync_weights` runs on the engine's worker thread between two
    engine calls (the worker of `batcher_of()`; on the caller's thread while nothing serves)."""

    def __init__(self, engine: Any, batcher_of: Any) -> None:
        self.engine, self.batcher_of = engine, batcher_of

    def sync_weights(self, version: int) -> None:
        batcher = self.batcher_of()
        if batcher is None:
            self.engine.sync_weights(version)
        else:
            batcher.call(lambda: self.engine.sync_weights(version)).result()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class LiveTrainer(Trainer):
    """See the module docstring. `keys`: the clients (`live.keys.load_keys`)."""

    def __init__(self, cfg: Config, keys: dict[bytes, Client]) -> None:
        check_live(cfg)
        self.keys = keys
        self.score_fn: ScoreFn | None = (
            load_function(cfg.live.score_fn, "live.score_fn", ConfigError) if cfg.live.score_fn else None
        )
        cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, save_freq=1))
        self.server: LiveServer | None = None
        self.pending: list[Session] = []  # trained by the last step, marked once it is checkpointed
        super().__init__(cfg)

    def _build_loop(self, cfg: Config, data: Any) -> None:
        super()._build_loop(cfg, data)
        if hasattr(self.engine, "sample_from_copy"):
            self.engine.sample_from_copy()
        # stage 12b and a resume swap the served weights on the engine's worker, between two calls
        self.served = self.engine
        self.engine = BetweenCalls(self.served, self._batcher)  # type: ignore[assignment]
        self.total_steps = cfg.trainer.total_training_steps or sys.maxsize  # 0: until stopped
        self.max_lag = cfg.trainer.max_staleness // updates_per_step(cfg)

    def _resume(self) -> None:
        super()._resume()
        self._start_serving()  # after the checkpoint: the store replays against its step

    def _start_serving(self) -> None:
        """The session store replayed from disk, then the server on the engine."""
        lc, d, ac = self.cfg.live, self.cfg.data, self.cfg.rollout.agent
        limits = Limits(
            lc.max_open_sessions, lc.max_store_mb << 20, lc.max_session_id, lc.session_idle_s,
            lc.reward_window_s, lc.group_by, lc.group_size, lc.group_wait_s,
        )  # fmt: skip
        self.store = SessionStore(self.run_dir / "live", limits)
        self.store.learning = lc.learn
        self.store.replay(self.state.global_step)
        try:  # `rollout.agent.chat_template`, as for an agent function, else the tokenizer's own
            template = ChatTemplate(with_template(self.tokenizer, ac.chat_template))
        except ChatTemplateError as err:
            raise ConfigError(
                f"rollout.agent.chat_template: {err}; a live server needs a chat template"
            ) from None
        limits_ep = EpisodeLimits(d.max_prompt_length, d.max_response_length, ac.max_calls, ac.max_forks)
        params = self.sampler.params(0)
        self.server = LiveServer(
            self.served, template, limits_ep, self.keys, params, self.store, self.score_fn, lc.host, lc.port
        )
        self.server.start(create_app(self.server))
        (self.run_dir / "live" / "serving.pid").write_text(str(os.getpid()))
        print(f"serving at {self.server.url} (policy version {self.state.policy_version})", flush=True)

    # -- stages 1-6: the clients' sessions ------------------------------------------------------------
    def produce(self, step: int) -> Produced:
        clock = StageClock(self.hooks)
        version, fresh, stale_count = self.state.policy_version, [], 0
        with clock("load_batch"):  # waiting for traffic: the step's groups of rewarded sessions
            while len(fresh) < self.cfg.data.train_batch_size:
                groups = self.store.take(self.cfg.data.train_batch_size - len(fresh))
                if not groups:
                    raise Stopped
                more, stale = split_stale(groups, version, self.max_lag)
                self.store.drop_taken([s for g in stale for s in g], "stale")
                fresh += more
                stale_count += sum(len(g) for g in stale)
        batch = group_batch(fresh, step, self.pad_id, self.cfg.data.max_response_length)
        self.pending = [s for g in fresh for s in g]
        rewards = [float(s.outcome() or 0.0) for s in self.pending]
        metrics: dict[str, Any] = {
            "live/groups": len(fresh),
            "live/sessions": len(self.pending),
            "live/reward/mean": sum(rewards) / len(rewards),
            "live/policy_version": version,
            "live/dropped/stale": stale_count,
        }
        status = self.store.status()
        metrics.update({f"live/count/{k}": v for k, v in status["counts"].items()})
        metrics["live/open_sessions"] = status["sessions"]["open"]
        metrics["live/store_mb"] = status["store_bytes"] / 2**20
        return Produced(step, batch, metrics, clock.timing.seconds, self.loader.state_dict())

    def _batcher(self) -> Any:
        return self.server.gateway.runner.batcher if self.server is not None else None

    def validate(self) -> dict[str, float]:
        batcher = self._batcher()
        if batcher is None:
            return super().validate()
        return batcher.call(super().validate).result()  # type: ignore[no-any-return]

    def save(self) -> None:
        if self.pending:  # marked first: a crash before the checkpoint is whole trains them once more
            self.store.trained(self.pending, self.state.global_step)
            self.pending = []
        super().save()
        self.store.compact()

    def stop(self) -> None:
        """Ask the loop to stop at the next wait for sessions (from a signal handler)."""
        if hasattr(self, "store"):
            self.store.stop()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
            (self.run_dir / "live" / "serving.pid").unlink(missing_ok=True)
        super().close()
