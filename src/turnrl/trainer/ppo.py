"""The training loop. It reads like ARCHITECTURE §2: one named, timed stage per line."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from turnrl.batch import Batch
from turnrl.config import Config, to_yaml
from turnrl.data.loader import StatefulLoader
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tracking.logger import Tracker
from turnrl.trainer import checkpoint, stages
from turnrl.trainer.metrics import data_metrics, extra_metrics, timing_metrics
from turnrl.trainer.setup import build, make_run_dir
from turnrl.trainer.validation import validate
from turnrl.workers.actor import Actor

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: Config, recorder: stages.Recorder | None = None):
        self.cfg = cfg
        self.recorder = recorder
        parts = build(cfg)  # loads and checks everything: a failure here writes nothing
        self.model, self.tokenizer, self.device = parts.model, parts.tokenizer, parts.device
        self.val_examples = parts.val_examples
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.reward = RuleReward(
            self.tokenizer, cfg.reward.custom_function.path, cfg.reward.custom_function.name
        )
        self.reward.check({e.data_source for e in parts.train_examples + parts.val_examples})
        self.engine = HFEngine(self.model, self.tokenizer, cfg.rollout.generation_batch_size)
        self.actor = Actor(self.model, cfg.actor, cfg.rollout.temperature, not cfg.model.gradient_checkpointing)
        self.loader = StatefulLoader(
            parts.train_examples, cfg.data.train_batch_size, self.pad_id, cfg.trainer.seed, cfg.data.shuffle
        )
        per_epoch = len(self.loader)
        self.total_steps = cfg.trainer.total_training_steps or per_epoch * cfg.trainer.total_epochs
        self.global_step = 0
        self.run_dir = make_run_dir(cfg)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.run_dir / ".config.yaml.tmp"
        tmp.write_text(to_yaml(cfg))
        tmp.replace(self.run_dir / "config.yaml")
        self.tracker = Tracker(self.run_dir, cfg.trainer.logger)
        self._resume()

    # -- the step ------------------------------------------------------------------------------
    def sampling(self, step: int) -> SamplingParams:
        r = self.cfg.rollout
        return SamplingParams(
            max_new_tokens=self.cfg.data.max_response_length,
            n=r.n,
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            stop=list(r.stop),
            seed=self.cfg.trainer.seed * 1_000_003 + step,  # seeded runs are reproducible
        )

    def step(self, batch: Batch) -> dict[str, Any]:
        cfg, clock, n = self.cfg, stages.StageClock(self.recorder), self.cfg.rollout.n
        start = time.perf_counter()
        with clock("load_batch") as s:
            s["batch"] = batch
        with clock("gen_batch") as s:
            gen_batch = s["batch"] = stages.split_generation_input(batch)
        with clock("gen") as s:
            rollout = s["batch"] = stages.generate(
                self.engine,
                gen_batch,
                self.sampling(self.global_step),
                self.pad_id,
                cfg.data.max_response_length,
            )
        with clock("group") as s:
            batch = s["batch"] = stages.group_and_merge(batch, rollout, n)
        with clock("reward") as s:
            extras = stages.score(self.reward, batch)
            s["batch"] = batch
        with clock("old_log_prob") as s:
            batch["old_log_probs"], _ = self.actor.compute_log_prob(batch)
            s["batch"] = batch
        with clock("adv") as s:
            stages.advantages(batch, cfg)
            s["batch"] = batch
        with clock("update_actor"):
            actor_metrics = self.actor.update(batch, cfg.actor.ppo_mini_batch_size * n, seed=self.global_step)
        metrics = {
            **actor_metrics,
            **data_metrics(batch, cfg.data.max_response_length),
            **extra_metrics(extras),
        }
        metrics.update(timing_metrics(clock.timing, batch, time.perf_counter() - start))
        return metrics

    # -- the loop ------------------------------------------------------------------------------
    def fit(self) -> Path:
        t = self.cfg.trainer
        if t.val_before_train and self.global_step == 0:
            self.tracker.log(self.validate(), step=0)
        bar = tqdm(
            total=self.total_steps, initial=self.global_step, desc="train", unit="step", dynamic_ncols=True
        )
        last_val = self.global_step
        while self.global_step < self.total_steps:
            for batch in self.loader.epoch_batches():
                self.global_step += 1
                metrics = self.step(batch)
                metrics["training/global_step"] = self.global_step
                metrics["training/epoch"] = self.loader.epoch
                if t.test_freq and self.global_step % t.test_freq == 0:
                    metrics.update(self.validate())
                    last_val = self.global_step
                self.tracker.log(metrics, step=self.global_step)
                bar.update(1)
                if t.save_freq and self.global_step % t.save_freq == 0:
                    self.save()
                if self.global_step >= self.total_steps:
                    break
        bar.close()
        if last_val != self.global_step:
            self.tracker.log(self.validate(), step=self.global_step)
        self.save()
        self.tracker.close()
        return self.run_dir

    def validate(self) -> dict[str, float]:
        r = self.cfg.rollout
        params = SamplingParams(
            max_new_tokens=self.cfg.data.max_response_length,
            n=r.val_n,
            temperature=r.val_temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            stop=list(r.stop),
            seed=self.cfg.trainer.seed,
        )
        start = time.perf_counter()
        metrics, samples = validate(
            self.engine,
            self.reward,
            self.val_examples,
            params,
            self.cfg.data.val_batch_size,
            self.pad_id,
            self.cfg.data.max_response_length,
        )
        metrics["timing_s/validate"] = time.perf_counter() - start
        dump = self.run_dir / "val_samples" / f"step_{self.global_step}.jsonl"
        dump.parent.mkdir(exist_ok=True)
        dump.write_text("".join(json.dumps(s, default=str) + "\n" for s in samples))
        return metrics

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self) -> None:
        state = {"global_step": self.global_step, "loader": self.loader.state_dict()}
        checkpoint.save(self.run_dir, self.global_step, self.model, self.actor.state_dict(), state)

    def _resume(self) -> None:
        if not self.cfg.trainer.resume:
            return
        path = checkpoint.latest(self.run_dir)
        if path is None:
            return
        actor_state, state = checkpoint.load(path, self.model)
        self.actor.load_state_dict(actor_state)
        self.loader.load_state_dict(state["loader"])
        self.global_step = int(state["global_step"])
        log.warning("resumed from %s at step %d", path, self.global_step)


__all__ = ["Trainer"]
