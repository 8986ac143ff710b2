"""The training loop. It reads like ARCHITECTURE §2: one named, timed stage per line.

The driver holds no model and no optimizer: it calls each role through its worker group
(`workers/group.py`) on `Batch`es, so the same lines run in one process or over many ranks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from turnrl.algorithms.kl import make_kl_controller
from turnrl.batch import Batch
from turnrl.config import Config, ConfigError, check_config, to_yaml
from turnrl.data.loader import StatefulLoader
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import Rollout, SamplingParams
from turnrl.tracking.dump import dump_rollouts
from turnrl.tracking.logger import Tracker
from turnrl.tracking.sinks import check_sinks
from turnrl.trainer import checkpoint, stages
from turnrl.trainer.metrics import async_metrics, data_metrics, extra_metrics, timing_metrics, version_metrics
from turnrl.trainer.producer import Produced, RolloutProducer
from turnrl.trainer.setup import Data, build_data, build_reward, build_roles, build_rollout, make_run_dir
from turnrl.trainer.validation import validate

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: Config, recorder: stages.Recorder | None = None):
        check_config(cfg)
        if recorder is not None and cfg.trainer.mode == "async":
            raise ConfigError("the step inspector records one synchronous step: set trainer.mode=sync")
        check_sinks(cfg.trainer.logger)  # a missing logger package fails before the model loads
        self.cfg, self.recorder = cfg, recorder
        data = build_data(cfg)  # everything is loaded and checked before anything is written
        self.tokenizer, self.val_examples = data.tokenizer, data.val_examples
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.run_dir = make_run_dir(cfg)  # named now; created once every check has passed
        self.roles = build_roles(cfg, self.tokenizer, self.run_dir)
        try:  # from here on, a failure must not leave ranks, Ray or tool servers behind
            self._start(cfg, data)
        except BaseException:
            self.close()
            raise

    def _start(self, cfg: Config, data: Data) -> None:
        self.actor, self.ref, self.critic = self.roles.actor, self.roles.ref, self.roles.critic
        self.reward_model = self.roles.reward_model
        self.engine = self.actor.rollout_engine()
        if cfg.trainer.mode == "async":  # a response may start before a weight update and end after it
            self.engine.max_lag = cfg.trainer.max_staleness  # type: ignore[attr-defined]
        # agent mode starts and health-checks tool servers here: before any disk write.
        # async with overlap: episodes stream one by one instead of advancing turn by turn together
        streaming = cfg.trainer.mode == "async" and cfg.trainer.max_staleness > 0
        self.rollout: Rollout = build_rollout(cfg, self.engine, self.tokenizer, self.pad_id, streaming)
        self.reward: RuleReward = build_reward(cfg, self.tokenizer, self.rollout)
        self.bypass = stages.old_log_probs_from_rollout(cfg)
        self.reward.check({e.data_source for e in data.train_examples + data.val_examples})
        self.kl_ctrl = None
        if cfg.algorithm.use_kl_in_reward:
            kc = cfg.algorithm.kl_ctrl
            self.kl_ctrl = make_kl_controller(kc.type, kc.kl_coef, kc.target_kl, kc.horizon)
        self.loader = StatefulLoader(
            data.train_examples, cfg.data.train_batch_size, self.pad_id, cfg.trainer.seed, cfg.data.shuffle
        )
        self.batches = self._batch_stream()
        self.total_steps = cfg.trainer.total_training_steps or len(self.loader) * cfg.trainer.total_epochs
        self.global_step = 0
        self.validated_step = -1  # the step of the last validation logged (-1: none yet)
        self.trained_loader_state = self.loader.state_dict()
        self.producer: RolloutProducer | None = None  # async mode, while fit() runs
        self.regenerated = 0  # async rollouts buffered at the checkpoint this run resumed from
        self.policy_version = 0  # +1 per actor update; every sample records the version that made it
        # seeded runs are reproducible, except streamed agent episodes: a server batches only unseeded
        # requests, and with overlap the weight versions depend on timing anyway
        t = cfg.trainer
        self.unseeded = t.mode == "async" and t.max_staleness > 0 and cfg.rollout.multi_turn.enable
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.run_dir / ".config.yaml.tmp"
        tmp.write_text(to_yaml(cfg))
        tmp.replace(self.run_dir / "config.yaml")
        self.tracker = Tracker(
            self.run_dir,
            cfg.trainer.logger,
            project=cfg.trainer.project_name,
            experiment=cfg.trainer.experiment_name,
            config=dataclasses.asdict(cfg),
        )
        self._resume()

    # -- the step ------------------------------------------------------------------------------
    def step(self, batch: Batch) -> dict[str, Any]:
        """One synchronous step: stages 1-13."""
        clock = stages.StageClock(self.recorder)
        start = time.perf_counter()
        with clock("load_batch", batch):
            pass
        # stages 2-6, repeated by dynamic sampling
        batch, metrics = self.rollout_and_score(batch, clock, self.global_step)
        return self.train_on(batch, metrics, clock, start)

    def async_step(
        self, item: Produced, trainer_idle_s: float, queue_depth: int, start: float
    ) -> dict[str, Any]:
        """Stages 7-13 on a rollout the producer made (stages 2-6 ran in its thread, overlapping the
        previous update); samples older than `max_staleness` versions are dropped, whole groups."""
        clock = stages.StageClock(None)
        clock.timing.update(item.timing)
        batch, dropped = stages.drop_stale(item.batch, self.policy_version, self.cfg.trainer.max_staleness)
        metrics = dict(item.metrics)
        metrics.update(
            async_metrics(batch, self.policy_version, trainer_idle_s, item.gate_wait_s, queue_depth)
        )
        metrics["async/dropped_stale"] = dropped
        if self.regenerated:  # buffered when the checkpoint we resumed from was written
            metrics["async/regenerated_on_resume"], self.regenerated = self.regenerated, 0
        self.trained_loader_state = item.loader_state
        return self.train_on(batch, metrics, clock, start)

    def train_on(
        self, batch: Batch, metrics: dict[str, Any], clock: stages.StageClock, start: float
    ) -> dict[str, Any]:
        """Stages 7-13 on a rolled-out, scored batch."""
        cfg = self.cfg
        metrics.update(version_metrics(batch, self.policy_version))
        rc = cfg.algorithm.rollout_correction
        if self.bypass:  # the engine's log-probs are the step-start policy's: no trainer forward pass
            batch["old_log_probs"] = batch["rollout_log_probs"]
        else:
            with clock("old_log_prob", batch):
                batch["old_log_probs"] = self.actor.compute_log_prob(batch)["log_probs"]
                metrics.update(stages.correct_off_policy(batch, rc))
        if self.ref:
            with clock("ref", batch):
                batch.union(self.ref.compute_ref_log_prob(batch))
        if self.critic:
            with clock("values", batch):
                batch.union(self.critic.compute_values(batch))
        if self.kl_ctrl:
            with clock("kl_in_reward", batch):
                metrics.update(stages.kl_in_reward(batch, self.kl_ctrl, cfg.algorithm.kl_penalty))
        with clock("adv", batch):
            stages.advantages(batch, cfg)
        if self.critic:
            with clock("update_critic"):
                metrics.update(self.critic.update(batch, step=self.global_step))
        if self.global_step > cfg.trainer.critic_warmup:
            with clock("update_actor") as st:
                actor_metrics, st.batch = self.actor.update(
                    batch, self.global_step, self.recorder is not None
                )
                metrics.update(actor_metrics)
            with clock("sync_weights"):
                self.policy_version += 1
                self.engine.sync_weights(self.policy_version)
        metrics.update(data_metrics(batch, cfg.data.max_response_length))
        metrics.update(self.roles.dispatch_metrics())
        metrics.update(timing_metrics(clock.timing, batch, time.perf_counter() - start))
        if cfg.trainer.rollout_dump_freq and self.global_step % cfg.trainer.rollout_dump_freq == 0:
            dump_rollouts(self.run_dir, self.global_step, batch, self.tokenizer)
        return metrics

    def rollout_and_score(
        self, batch: Batch, clock: stages.StageClock, step: int
    ) -> tuple[Batch, dict[str, Any]]:
        """Stages 2-6 for training step `step` (it seeds the sampling); with DAPO dynamic sampling,
        repeated on fresh prompts until the batch is full."""
        cfg, n, fg = self.cfg, self.cfg.rollout.n, self.cfg.algorithm.filter_groups
        kept: list[Batch] = []
        extras: dict[str, list[float]] = {}
        dropped = rounds = 0
        while True:
            rounds += 1
            with clock("gen_batch") as st:
                gen_batch = st.batch = stages.split_generation_input(batch)
            with clock("gen") as st:
                rollout, gen_metrics = self.rollout.generate(gen_batch, self.sampling(step, rounds))
                st.batch = rollout
            with clock("group") as st:
                merged = st.batch = stages.group_and_merge(batch, rollout, n)
            if cfg.algorithm.adv_estimator == "remax":
                with clock("gen_max"):
                    merged["reward_baselines"] = self.greedy_baseline(
                        batch, gen_batch, step
                    ).repeat_interleave(n)
            with clock("reward", merged):
                for k, v in self.score(merged).items():
                    extras.setdefault(k, []).extend(v)
            if not fg.enable:
                return merged, {**extra_metrics(extras), **gen_metrics}
            merged, n_dropped = stages.keep_varied_groups(merged)
            dropped += n_dropped
            kept.append(merged)
            have = sum(len(b) for b in kept) // n
            if have >= cfg.data.train_batch_size or rounds >= fg.max_num_gen_batches:
                break
            batch = next(self.batches)
        merged = Batch.concat(kept).index(slice(0, cfg.data.train_batch_size * n))
        metrics = {**extra_metrics(extras), **gen_metrics}
        metrics.update(
            {
                "batch/num_gen_batches": rounds,
                "batch/dropped_groups": dropped,
                "batch/kept_prompts": len(merged) // n,
            }
        )
        if len(merged) == 0:
            raise RuntimeError(
                f"dynamic sampling kept no group in {rounds} rounds: every group's scores were equal"
            )
        return merged, metrics

    def score(self, batch: Batch) -> dict[str, list[float]]:
        """Stage 6: rule score, plus reward model, plus overlong shaping, at the last model token."""
        cfg = self.cfg
        extras = stages.score(self.reward, batch)
        if self.reward_model:
            rm = self.reward_model.score(batch)["rm_scores"]
            stages.add_to_last_token(batch, cfg.reward_model.coef * rm)
            extras["reward_model_score"] = rm.tolist()
        ob = cfg.reward.overlong_buffer
        if ob.enable:
            stages.overlong_shaping(batch, cfg.data.max_response_length, ob.len, ob.penalty_factor)
        return extras

    def greedy_baseline(self, prompts: Batch, gen_batch: Batch, step: int) -> Any:
        """ReMax's baseline: the score of a greedy response to the same prompt."""
        params = dataclasses.replace(self.sampling(step, 0), n=1, temperature=0.0)
        rollout, _ = self.rollout.generate(gen_batch, params)
        greedy = stages.group_and_merge(prompts, rollout, 1)
        self.score(greedy)
        return greedy["token_level_scores"].sum(-1)

    def sampling(self, step: int, round_: int = 1) -> SamplingParams:
        r = self.cfg.rollout
        return SamplingParams(
            max_new_tokens=self.cfg.data.max_response_length,
            n=r.n,
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            stop=list(r.stop),
            ignore_eos=r.ignore_eos,
            seed=None if self.unseeded else (self.cfg.trainer.seed * 1_000_003 + step) * 31 + round_,
        )

    # -- the loop ------------------------------------------------------------------------------
    def fit(self) -> Path:
        from tqdm import tqdm

        t = self.cfg.trainer
        if t.val_before_train and self.global_step == 0:
            self.tracker.log(self.validate(), step=0)
            self.validated_step = 0
        bar = tqdm(
            total=self.total_steps, initial=self.global_step, desc="train", unit="step", dynamic_ncols=True
        )
        if t.mode == "async":
            self.producer = RolloutProducer(
                self.produce, self.global_step + 1, self.total_steps, t.max_staleness
            )
        try:
            while self.global_step < self.total_steps:
                start = time.perf_counter()
                if self.producer:
                    item, idle, depth = self.producer.next()
                    self.global_step = item.step
                    metrics = self.async_step(item, idle, depth, start)
                    self.producer.step_done(self.global_step)  # the next rollouts may start
                else:
                    batch = next(self.batches)
                    self.global_step += 1
                    metrics = self.step(batch)
                    self.trained_loader_state = self.loader.state_dict()
                metrics["training/global_step"] = self.global_step
                metrics["training/epoch"] = self.trained_loader_state["epoch"]
                if t.test_freq and self.global_step % t.test_freq == 0:
                    metrics.update(self.validate())
                    self.validated_step = self.global_step
                self.tracker.log(metrics, step=self.global_step)
                bar.update(1)
                if t.save_freq and self.global_step % t.save_freq == 0:
                    self.save()
            bar.close()
            # also when a run killed after its last step's checkpoint resumes: it validates then
            if self.validated_step != self.global_step:
                self.tracker.log(self.validate(), step=self.global_step)
                self.validated_step = self.global_step
            self.save()
        finally:
            self.close()
        return self.run_dir

    def produce(self, step: int) -> Produced:
        """Async mode, in the producer's thread: draw the prompts of `step` and run stages 2-6."""
        clock = stages.StageClock(None)
        batch = next(self.batches)
        rolled, metrics = self.rollout_and_score(batch, clock, step)
        return Produced(step, rolled, metrics, clock.timing, self.loader.state_dict())

    def close(self) -> None:
        """Stop the producer, child tool servers, release the roles, flush loggers; safe on a
        half-built trainer."""
        if getattr(self, "producer", None):
            self.producer.close()
        for part in ("rollout", "reward", "roles", "tracker"):
            if hasattr(self, part):
                getattr(self, part).close()

    def _batch_stream(self) -> Iterator[Batch]:
        while True:  # epochs roll over; a resume at an epoch's end simply starts the next one
            yield from self.loader.epoch_batches()

    def validate(self) -> dict[str, float]:
        r = self.cfg.rollout
        params = dataclasses.replace(
            self.sampling(0), n=r.val_n, temperature=r.val_temperature, seed=self.cfg.trainer.seed
        )
        start = time.perf_counter()
        metrics, samples = validate(
            self.rollout,
            self.reward,
            self.val_examples,
            params,
            self.cfg.data.val_batch_size,
            self.pad_id,
        )
        metrics["timing_s/validate"] = time.perf_counter() - start
        dump = self.run_dir / "val_samples" / f"step_{self.global_step}.jsonl"
        dump.parent.mkdir(exist_ok=True)
        dump.write_text("".join(json.dumps(s, default=str) + "\n" for s in samples))
        return metrics

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self) -> None:
        state = {
            "global_step": self.global_step,
            "policy_version": self.policy_version,
            # the position after the last *trained* batch: async batches still buffered are
            # regenerated on resume (counted), never lost or trained twice
            "loader": self.trained_loader_state,
            "kl_coef": self.kl_ctrl.value if self.kl_ctrl else None,
            "validated_step": self.validated_step,
            "buffered_rollouts": self.producer.buffered() if self.producer else 0,
        }
        checkpoint.save(
            self.run_dir,
            self.global_step,
            self.roles.owned(),
            state,
            self.cfg.trainer.max_checkpoints_to_keep,
        )

    def _resume(self) -> None:
        state = checkpoint.restore(self.run_dir, self.roles.owned(), self.tracker, self.cfg.trainer.resume)
        if state is None:
            return
        if self.kl_ctrl and state.get("kl_coef") is not None:
            self.kl_ctrl.value = float(state["kl_coef"])
        self.loader.load_state_dict(state["loader"])
        self.trained_loader_state = self.loader.state_dict()
        self.regenerated = int(state.get("buffered_rollouts", 0))
        self.global_step = int(state["global_step"])
        # checkpoints written before this field existed were always validated at their step
        self.validated_step = int(state.get("validated_step", self.global_step))
        self.policy_version = int(state.get("policy_version", 0))
        self.engine.sync_weights(self.policy_version)


__all__ = ["Trainer"]
