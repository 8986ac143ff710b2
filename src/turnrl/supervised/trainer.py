"""The loop of `turnrl sft` and `turnrl rm`: batch -> step -> (validate) -> log -> (checkpoint), then
the model directory. The objective (`sft.py`, `rm.py`) decides what a row, a model and a loss are.

Checkpoints, resume and `metrics.jsonl` work as in `turnrl train` (docs/checkpoints.md): the
learner writes its weights, optimizer and RNG streams, the loop its step and loader position, and a
run started again with the same command resumes where the newest sound checkpoint left it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from turnrl.config import to_yaml
from turnrl.config.supervised_schema import RMConfig, SFTConfig
from turnrl.data.dataset import check_data_file
from turnrl.models.loader import load_tokenizer
from turnrl.models.precision import fallback_note
from turnrl.runtime import memory_metrics, seed_everything
from turnrl.supervised.batches import LengthGroupedLoader
from turnrl.supervised.chat import set_chat_template
from turnrl.supervised.checks import check_rm, check_sft
from turnrl.supervised.learner import Learner, Objective
from turnrl.supervised.output import write_model
from turnrl.supervised.rm import RMObjective
from turnrl.supervised.sft import SFTObjective
from turnrl.tracking.logger import Tracker
from turnrl.tracking.sinks import check_sinks
from turnrl.trainer import checkpoint
from turnrl.trainer.run_dirs import resolve_model_path
from turnrl.trainer.setup import make_run_dir, pick_device
from turnrl.workers.group import LocalGroup

log = logging.getLogger(__name__)

CONSOLE = ("sft/loss", "sft/tokens", "sft/grad_norm", "rm/loss", "rm/accuracy", "rm/margin", "rm/grad_norm")


def objective_for(cfg: SFTConfig | RMConfig, tokenizer: Any) -> Objective:
    return SFTObjective(cfg, tokenizer) if isinstance(cfg, SFTConfig) else RMObjective(cfg, tokenizer)


class SupervisedTrainer:
    def __init__(self, cfg: SFTConfig | RMConfig):
        if isinstance(cfg, SFTConfig):  # checked again: a config made in code skips load_config's check
            check_sft(cfg)
        else:
            check_rm(cfg)
        t = cfg.trainer
        self.cfg = cfg
        if t.num_threads:
            torch.set_num_threads(t.num_threads)
        seed_everything(t.seed)
        check_sinks(t.logger)  # a missing logger package fails before the model loads
        # an unwritable run directory fails before any model or tokenizer loads (nothing is created)
        self.run_dir = make_run_dir(cfg)  # type: ignore[arg-type]  # reads trainer.default_local_dir, experiment_name
        # a training run as `model.path`: its policy, exported once; config.yaml keeps the path as given
        model = dataclasses.replace(cfg.model, path=resolve_model_path(cfg.model.path, cfg.model.cache_dir))
        # every row read and checked before the model loads and anything is written
        self._read_data(dataclasses.replace(cfg, model=model))
        lengths = [self.objective.length(e) for e in self.train]
        self.loader = LengthGroupedLoader(
            lengths, t.train_batch_size, cfg.data.length_window, t.seed, cfg.data.shuffle
        )
        self.batches = self.loader.forever()
        self.total_steps = t.total_training_steps or len(self.loader) * t.total_epochs
        note = fallback_note(pick_device(t.device)) if model.compute_dtype == "auto" else ""
        if note:
            log.warning(note)
        self.learner = Learner(
            self.objective,
            model,
            cfg.optim,
            t.micro_batch_size,
            pick_device(t.device),
            t.seed,
            self.total_steps,
        )
        self.roles = {self.objective.name: LocalGroup([self.learner])}
        self.global_step, self.validated_step, self.saved_step = 0, -1, -1
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        self.console = "console" in t.logger  # our own line: the tracker's shows the RL metrics
        sinks = [s for s in t.logger if s != "console"]
        self.tracker = Tracker(
            self.run_dir, sinks, t.project_name, t.experiment_name, dataclasses.asdict(cfg)
        )
        try:
            self._resume()
        except BaseException:  # a checkpoint of another model or command: one line, files closed
            self.tracker.close()
            raise

    def _read_data(self, cfg: SFTConfig | RMConfig) -> None:
        for f in [*cfg.data.train_files, *cfg.data.val_files]:
            check_data_file(f)
        self.tokenizer = load_tokenizer(cfg.model.path, cfg.model.cache_dir)
        set_chat_template(self.tokenizer, cfg.data.chat_template)
        self.objective = objective_for(cfg, self.tokenizer)
        self.train = self.objective.load(cfg.data.train_files)
        val = self.objective.load(cfg.data.val_files) if cfg.data.val_files else []
        self.val = sorted(val, key=self.objective.length)  # micro-batches of neighbours in length

    def fit(self) -> Path:
        """Train to `total_steps`, validate, checkpoint, write `<run>/model/`; returns the run directory."""
        t = self.cfg.trainer
        bar = tqdm(total=self.total_steps, initial=self.global_step, desc=self.objective.name, unit="step")
        try:
            while self.global_step < self.total_steps:
                start = time.perf_counter()
                batch = [self.train[i] for i in next(self.batches)]
                self.global_step += 1
                metrics = self.learner.train_step(batch)
                metrics.update(self._progress(metrics, time.perf_counter() - start))
                if t.test_freq and self.global_step % t.test_freq == 0:
                    metrics.update(self.validate())
                self.log(metrics)
                bar.update(1)
                if t.save_freq and self.global_step % t.save_freq == 0:
                    self.save()
            bar.close()
            # saved before the final validation: one that dies (out of memory, killed) loses no
            # training; the run resumed from there validates, then saves that it did
            if self.saved_step != self.global_step:
                self.save()
            if self.validated_step != self.global_step:
                self.log(self.validate())
                self.save()
            out = write_model(self.learner.model, self.tokenizer, self.run_dir)
            log.info("model written to %s", out)
        finally:
            bar.close()
            self.tracker.close()
        return self.run_dir

    def validate(self) -> dict[str, float]:
        self.validated_step = self.global_step
        return self.learner.evaluate(self.val) if self.val else {}

    def log(self, metrics: dict[str, float]) -> None:
        if not metrics:
            return
        self.tracker.log(metrics, step=self.global_step)
        if self.console:
            name = self.objective.name
            shown = [
                f"{k}={v:.4g}" for k, v in metrics.items() if k in CONSOLE or k.startswith(f"val/{name}/")
            ]
            tqdm.write(f"step {self.global_step}: " + "  ".join(shown))

    def _progress(self, metrics: dict[str, float], seconds: float) -> dict[str, float]:
        tokens = metrics.get("perf/total_num_tokens", 0.0)
        return {
            "training/global_step": float(self.global_step),
            "training/epoch": float(self.loader.epoch),
            "timing_s/step": seconds,
            "perf/throughput": tokens / seconds if seconds > 0 else 0.0,
            **memory_metrics(),
        }

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self) -> None:
        state = {
            "global_step": self.global_step,
            "loader": self.loader.state_dict(),
            "validated_step": self.validated_step,
        }
        checkpoint.save(
            self.run_dir, self.global_step, self.roles, state, self.cfg.trainer.max_checkpoints_to_keep
        )
        self.saved_step = self.global_step

    def _resume(self) -> None:
        state = checkpoint.restore(self.run_dir, self.roles, self.tracker, self.cfg.trainer.resume)
        if state is None:
            return
        self.loader.load_state_dict(state["loader"])
        self.global_step = self.saved_step = int(state["global_step"])
        self.validated_step = int(state["validated_step"])
