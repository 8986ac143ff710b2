"""The training loop: one named, timed stage per line, as in docs/architecture.md's dataflow table.

The driver holds no model and no optimizer: it calls each role through its handle
(`workers/handles.py`) on `Batch`es, so the same lines run in one process or over many ranks.

One path in both modes: the producer (`producer.py`) runs stages 1-6 of a step (`produce`), and
`step` runs stages 7-13 on what it made. A synchronous run is the producer with no lead (k = 0): it
produces inline when `step` asks. Async mode lets it run up to `trainer.max_staleness` optimizer updates (in whole steps) ahead
in a thread. Whatever watches the stages (timing, the step inspector) is a hook of the stage clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from turnrl.algorithms.kl import make_kl_controller
from turnrl.batch import Batch
from turnrl.config import Config, ConfigError, check_config, to_yaml
from turnrl.config.checks import staleness_lead, updates_per_step
from turnrl.data.curriculum import GroupWatch, make_loader
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import Rollout
from turnrl.tracking.dump import dump_rollouts
from turnrl.tracking.logger import Tracker
from turnrl.tracking.sinks import check_sinks
from turnrl.trainer import checkpoint, stages
from turnrl.trainer.metrics import (
    QueueTimes,
    async_metrics,
    data_metrics,
    idle_share,
    timing_metrics,
    version_metrics,
)
from turnrl.trainer.producer import Produced, RolloutProducer
from turnrl.trainer.sampling import StepSampler
from turnrl.trainer.setup import Data, build_data, build_reward, build_roles, build_rollout, make_run_dir
from turnrl.trainer.stages import StageClock, StageHook
from turnrl.trainer.state import RunState
from turnrl.trainer.validation import validate

log = logging.getLogger(__name__)


class Trainer:
    """A run, assembled from its config and resumed from its newest checkpoint if it has one; `fit()`
    trains it. `hooks`: told of every stage of every step (the step inspector's recorder is one);
    they watch a synchronous run, whose stages happen in order in one thread."""

    def __init__(self, cfg: Config, hooks: Sequence[StageHook] = ()):
        check_config(cfg)
        if hooks and cfg.trainer.mode == "async":
            raise ConfigError("the step inspector records one synchronous step: set trainer.mode=sync")
        check_sinks(cfg.trainer.logger)  # a missing logger package fails before the model loads
        self.cfg, self.hooks = cfg, list(hooks)
        # named now, before the tokenizer and data load (an unwritable one fails in a second);
        # created once every check has passed
        self.run_dir = make_run_dir(cfg)
        data = build_data(cfg)  # everything is loaded and checked before anything is written
        self.tokenizer, self.val_examples = data.tokenizer, data.val_examples
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.roles = build_roles(cfg, self.tokenizer, self.run_dir)
        try:  # from here on, a failure must not leave ranks, Ray or tool servers behind
            self._build_loop(cfg, data)
            self._open_run(cfg)
            self._resume()
            # once the checkpoint has loaded: a resume that fails (a checkpoint of another model)
            # leaves the run's config.yaml as it was
            self._write_config(cfg)
        except BaseException:
            self.close()
            raise

    def _build_loop(self, cfg: Config, data: Data) -> None:
        """The parts the step calls: roles, engine, rollout, reward, KL controller, data, producer."""
        t, kc = cfg.trainer, cfg.algorithm.kl_ctrl
        self.actor, self.ref, self.critic = self.roles.actor, self.roles.ref, self.roles.critic
        self.reward_model = self.roles.reward_model
        # the producer's lead: how many versions (steps) a response may be behind when it is trained,
        # `trainer.max_staleness` optimizer updates in whole steps
        self.lag = staleness_lead(cfg)
        self.updates_per_step = updates_per_step(cfg)
        self.engine = self.actor.rollout_engine()
        self.engine.max_lag = self.lag  # a response may start before a weight update and end after it
        # agent mode starts and health-checks tool servers here: before any disk write. With a lead,
        # episodes stream one by one instead of advancing turn by turn together
        self.rollout: Rollout = build_rollout(cfg, self.engine, self.tokenizer, self.pad_id, self.lag > 0)
        self.reward: RuleReward = build_reward(cfg, self.tokenizer, self.rollout.services)
        self.reward.check({e.data_source for e in data.train_examples + data.val_examples})
        self.bypass = stages.old_log_probs_from_rollout(cfg)
        self.kl_ctrl = None
        if cfg.algorithm.use_kl_in_reward:
            self.kl_ctrl = make_kl_controller(kc.type, kc.kl_coef, kc.target_kl, kc.horizon)
        self.loader = make_loader(cfg.data, data.train_examples, self.pad_id, t.seed)  # data.sampler
        self.watch = GroupWatch(self.loader)  # told of every scored round: data/flat_groups, the curriculum
        self.batches = self._batch_stream()
        self.total_steps = t.total_training_steps or len(self.loader) * t.total_epochs
        # seeded runs are reproducible, except streamed agent episodes: a server batches only unseeded
        # requests, and with a lead the weight versions depend on timing anyway
        seeded = not (self.lag > 0 and cfg.rollout.multi_turn.enable)
        self.sampler = StepSampler(
            cfg, self.rollout, self.reward, self.reward_model, self.batches, seeded, self.watch.observe,
            self.pad_id,
        )  # fmt: skip
        self.producer: RolloutProducer | None = None  # started by the first step
        self.state = RunState(
            loader=self.loader.state_dict(), kl_coef=self.kl_ctrl.value if self.kl_ctrl else None
        )
        self.saved_step = -1  # the step of the newest checkpoint on disk (-1: none)

    def _open_run(self, cfg: Config) -> None:
        """Create the run directory and the tracker (metrics.jsonl, ...). What would be in the way
        (a directory named metrics.jsonl or config.yaml, ...) was found by `make_run_dir`."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.tracker = Tracker(
            self.run_dir,
            cfg.trainer.logger,
            project=cfg.trainer.project_name,
            experiment=cfg.trainer.experiment_name,
            config=dataclasses.asdict(cfg),
        )

    def _write_config(self, cfg: Config) -> None:
        """The run's config.yaml, replaced atomically; no temporary file is left, whatever happens."""
        tmp = self.run_dir / ".config.yaml.tmp"
        try:
            tmp.write_text(to_yaml(cfg))
            tmp.replace(self.run_dir / "config.yaml")
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)

    # -- the loop ------------------------------------------------------------------------------
    def fit(self) -> Path:
        """Train to `total_steps`, logging every step and validating and saving on schedule; then
        save, validate (unless this step just was) and save again. Closes the trainer."""
        from tqdm import tqdm

        t = self.cfg.trainer
        try:
            if t.val_before_train and self.state.global_step == 0:
                self.tracker.log(self.validate(), step=0)
            bar = tqdm(
                total=self.total_steps,
                initial=self.state.global_step,
                desc="train",
                unit="step",
                dynamic_ncols=True,
            )
            while self.state.global_step < self.total_steps:
                metrics = self.step()
                if t.test_freq and self.state.global_step % t.test_freq == 0:
                    metrics.update(self.validate())
                self.tracker.log(metrics, step=self.state.global_step)
                bar.update(1)
                if t.save_freq and self.state.global_step % t.save_freq == 0:
                    self.save()
            bar.close()
            # saved before the final validation: a validation that dies (out of memory, killed) loses
            # no training; the run resumed from this checkpoint validates, then saves again
            if self.saved_step != self.state.global_step:
                self.save()
            if self.state.validated_step != self.state.global_step:
                self.tracker.log(self.validate(), step=self.state.global_step)
                self.save()  # records the validation: resuming the finished run does not repeat it
        finally:
            self.close()
        return self.run_dir

    def step(self) -> dict[str, Any]:
        """One training step: stages 1-6 from the producer (made now at k = 0, ahead otherwise),
        stages 7-13 here; then the producer may start the rollouts that waited for this update."""
        start = time.perf_counter()
        producer = self.producer or self._start_producer()
        item, idle_s, depth = producer.next()
        self.state.global_step = item.step
        clock = StageClock(self.hooks)
        clock.timing.seconds.update(item.timing)
        batch, metrics = self._admit(item, idle_s, depth)
        metrics.update(self.train_on(batch, clock))
        step_s = time.perf_counter() - start
        metrics.update(timing_metrics(clock.timing.seconds, batch, step_s))
        if self.cfg.trainer.mode == "async":
            metrics.update(idle_share(idle_s, step_s))
        self.state.loader = item.loader_state
        self.state.kl_coef = self.kl_ctrl.value if self.kl_ctrl else None
        metrics["training/global_step"] = self.state.global_step
        metrics["training/epoch"] = self.state.loader["epoch"]
        producer.step_done(item.step)
        return metrics

    def produce(self, step: int) -> Produced:
        """Stages 1-6 of step `step`, run by the producer: draw the prompts, sample, group, score."""
        clock = StageClock(self.hooks)
        with clock("load_batch") as st:
            prompts = st.batch = next(self.batches)
        # the in-process engine's prefill and decode work (rollout/work.py); other engines have none
        work = getattr(self.engine, "work", None)
        if work is not None:
            work.take()  # a validation's passes are not this step's
        batch, metrics = self.sampler.rollout_and_score(prompts, clock, step)  # stages 2-6, every round
        if work is not None:
            metrics.update(work.take())
        metrics.update(self.watch.metrics())  # the outcomes are in the loader's state taken next
        return Produced(step, batch, metrics, clock.timing.seconds, self.loader.state_dict())

    def _start_producer(self) -> RolloutProducer:
        self.producer = RolloutProducer(self.produce, self.state.global_step + 1, self.total_steps, self.lag)
        return self.producer

    def _admit(self, item: Produced, idle_s: float, depth: int) -> tuple[Batch, dict[str, Any]]:
        """Take a produced batch for training. Async mode drops groups more than k versions old and
        accounts for the staleness and for who waited for whom; a synchronous run trains what it
        sampled (its versions are the policy's own, and `rollout/policy_lag/max` shows it)."""
        batch, metrics, version = item.batch, dict(item.metrics), self.state.policy_version
        if self.cfg.trainer.mode == "async":
            batch, dropped = stages.drop_stale(batch, version, self.lag)
            age = time.perf_counter() - item.done_at
            times = QueueTimes(idle_s, item.gate_wait_s, item.timing.get("gen", 0.0), age)
            metrics.update(async_metrics(batch, version, times, depth, self.updates_per_step))
            metrics["async/dropped_stale"] = dropped
        if self.state.buffered_rollouts:  # buffered when the checkpoint we resumed from was written
            metrics["async/regenerated_on_resume"] = self.state.buffered_rollouts
            self.state.buffered_rollouts = 0
        return batch, metrics

    def train_on(self, batch: Batch, clock: StageClock) -> dict[str, Any]:
        """Stages 7-13 on a rolled-out, scored batch."""
        cfg, metrics = self.cfg, version_metrics(batch, self.state.policy_version)
        if self.bypass:  # the engine's log-probs are the step-start policy's: no trainer forward pass
            batch["old_log_probs"] = batch["rollout_log_probs"]
        else:
            with clock("old_log_prob", batch):
                batch["old_log_probs"] = self.actor.compute_log_prob(batch)["log_probs"]
                metrics.update(stages.correct_off_policy(batch, cfg.algorithm.rollout_correction))
        if self.ref:
            with clock("ref", batch):
                batch.union(self.ref.compute_ref_log_prob(batch))
        if self.roles.teacher:  # on-policy distillation: the teacher scores the student's own tokens
            with clock("teacher", batch):
                batch.union(self.roles.teacher.compute_teacher_log_prob(batch))
        if self.critic:
            with clock("values", batch):
                batch.union(self.critic.compute_values(batch))
        if self.kl_ctrl:
            with clock("kl_in_reward", batch):
                metrics.update(stages.kl_in_reward(batch, self.kl_ctrl, cfg.algorithm.kl_penalty))
        with clock("adv", batch):
            metrics.update(stages.advantages(batch, cfg, self.sampler.estimator))
        if self.critic:
            with clock("update_critic"):
                metrics.update(self.critic.update(batch, step=self.state.global_step))
        if self.state.global_step > cfg.trainer.critic_warmup:
            with clock("update_actor") as st:
                # the per-token diagnostics only when a hook reads batches (the step inspector)
                actor_metrics, st.batch = self.actor.update(
                    batch, self.state.global_step, clock.wants_batches
                )
                metrics.update(actor_metrics)
            with clock("sync_weights"):
                self.state.policy_version += 1
                self.engine.sync_weights(self.state.policy_version)
        metrics.update(data_metrics(batch, cfg.data.max_response_length))
        metrics.update(self.roles.dispatch_metrics())
        if cfg.trainer.rollout_dump_freq and self.state.global_step % cfg.trainer.rollout_dump_freq == 0:
            dump_rollouts(self.run_dir, self.state.global_step, batch, self.tokenizer)
        return metrics

    def _batch_stream(self) -> Iterator[Batch]:
        while True:  # epochs roll over; a resume at an epoch's end simply starts the next one
            yield from self.loader.epoch_batches()

    # -- validation, checkpoints, shutdown -----------------------------------------------------
    def validate(self) -> dict[str, float]:
        """The validation pass at the current step; its samples go to `val_samples/step_<N>.jsonl`."""
        r = self.cfg.rollout
        params = dataclasses.replace(
            self.sampler.params(0), n=r.val_n, temperature=r.val_temperature, seed=self.cfg.trainer.seed
        )
        start = time.perf_counter()
        metrics, samples = validate(
            self.rollout, self.reward, self.val_examples, params, self.cfg.data.val_batch_size, self.pad_id
        )
        metrics["timing_s/validate"] = time.perf_counter() - start
        dump = self.run_dir / "val_samples" / f"step_{self.state.global_step}.jsonl"
        dump.parent.mkdir(exist_ok=True)
        dump.write_text("".join(json.dumps(s, default=str) + "\n" for s in samples))
        self.state.validated_step = self.state.global_step
        return metrics

    def save(self) -> None:
        """A checkpoint: the roles' own states and the run state, with the rollouts buffered ahead of
        training right now (they are regenerated if the run resumes from here)."""
        buffered = self.producer.buffered() if self.producer else 0
        state = dataclasses.replace(self.state, buffered_rollouts=buffered)
        keep = self.cfg.trainer.max_checkpoints_to_keep
        checkpoint.save(self.run_dir, state.global_step, self.roles.owned(), state.to_dict(), keep)
        self.saved_step = state.global_step

    def _resume(self) -> None:
        """Go on from the newest sound checkpoint, if any: the roles load their own state, the run
        state comes back whole, and the engine takes the policy version the run was at."""
        saved = checkpoint.restore(self.run_dir, self.roles.owned(), self.tracker, self.cfg.trainer.resume)
        if saved is None:
            return
        self.state = RunState.from_dict(saved)
        self.saved_step = self.state.global_step  # the state came from a checkpoint of this very step
        if self.kl_ctrl and self.state.kl_coef is not None:
            self.kl_ctrl.value = float(self.state.kl_coef)
        self.loader.load_state_dict(self.state.loader)
        self.state.loader = self.loader.state_dict()
        self.engine.sync_weights(self.state.policy_version)

    def close(self) -> None:
        """Stop the producer, child tool servers, release the roles, flush loggers; safe on a
        half-built trainer."""
        producer: RolloutProducer | None = getattr(self, "producer", None)
        if producer is not None:
            producer.close()
        for part in ("rollout", "reward", "roles", "tracker"):
            if hasattr(self, part):
                getattr(self, part).close()


__all__ = ["Trainer"]
