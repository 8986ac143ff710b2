"""Everything a run needs, built and checked before anything is written to disk."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from turnrl.config import Config, ConfigError
from turnrl.data.dataset import DataError, Example, load_examples
from turnrl.data.tasks import write_task
from turnrl.models.loader import cache_root, load_tokenizer
from turnrl.workers.actor import Actor
from turnrl.workers.critic import Critic
from turnrl.workers.group import LocalGroup, WorkerGroup
from turnrl.workers.reference import Reference
from turnrl.workers.reward_model import RewardModel


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA device is available; use trainer.device=cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_data_files(cfg: Config) -> None:
    """Fill `data.train_files` / `val_files` with the built-in task when none are given."""
    if cfg.data.train_files and cfg.data.val_files:
        return
    out = cache_root(cfg.model.cache_dir) / "tasks" / f"{cfg.data.task}-seed{cfg.trainer.seed}"
    train, val = write_task(cfg.data.task, out, cfg.trainer.seed)
    cfg.data.train_files = cfg.data.train_files or [str(train)]
    cfg.data.val_files = cfg.data.val_files or [str(val)]


@dataclass
class Data:
    tokenizer: Any
    train_examples: list[Example]
    val_examples: list[Example]


def build_data(cfg: Config) -> Data:
    """Seeds, the tokenizer and both data splits, checked before any model loads."""
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    seed_everything(cfg.trainer.seed)
    resolve_data_files(cfg)
    for f in [*cfg.data.train_files, *cfg.data.val_files]:
        if not Path(f).is_file():  # fail before the minute-long model load
            raise DataError(f"data file not found: {f}")
    tokenizer = load_tokenizer(cfg.model.path, cfg.model.cache_dir)
    train = load_examples(cfg.data.train_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    val = load_examples(cfg.data.val_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    return Data(tokenizer, train, val)


@dataclass
class Roles:
    """One worker group per role; `ref` is the actor's group with LoRA (adapters off)."""

    actor: WorkerGroup
    ref: WorkerGroup | None
    critic: WorkerGroup | None
    reward_model: WorkerGroup | None

    def owned(self) -> dict[str, WorkerGroup]:
        """Groups that keep state of their own, by checkpoint sub-directory."""
        out = {
            "actor": self.actor,
            "reference": self.ref,
            "critic": self.critic,
            "reward_model": self.reward_model,
        }
        return {k: g for k, g in out.items() if g is not None and (k == "actor" or g is not self.actor)}


def build_roles(cfg: Config, tokenizer: Any) -> Roles:
    """Each role builds its own model from its own config section. The order is the order the
    global RNG is drawn in (LoRA init, then the value head): keep it, or seeded runs change."""
    device, seed = pick_device(cfg.trainer.device), cfg.trainer.seed
    actor = LocalGroup([Actor(cfg.actor, cfg.model, cfg.rollout, cfg.ref, device, seed)])
    ref = critic = reward_model = None
    if cfg.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
        lora = cfg.model.lora_rank > 0
        ref = actor if lora else LocalGroup([Reference(cfg.ref, cfg.model, cfg.rollout, device, seed)])
    if cfg.critic.enable:
        critic = LocalGroup([Critic(cfg.critic, cfg.model, cfg.rollout, device, seed)])
    if cfg.reward_model.enable:
        reward_model = LocalGroup([RewardModel(cfg.reward_model, tokenizer, device, seed)])
    return Roles(actor, ref, critic, reward_model)


def make_run_dir(cfg: Config) -> Path:
    if cfg.trainer.default_local_dir:
        return Path(cfg.trainer.default_local_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.trainer.experiment_name}-{stamp}"
