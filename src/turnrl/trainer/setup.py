"""Everything a run needs, built and checked before anything is written to disk."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from turnrl.config.schema import Config
from turnrl.data.dataset import Example, load_examples
from turnrl.data.tasks import write_task
from turnrl.models.loader import apply_lora, cache_root, load_model

log = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("trainer.device=cuda but no CUDA device is available; use trainer.device=cpu")
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
class Components:
    model: torch.nn.Module
    tokenizer: Any
    device: torch.device
    train_examples: list[Example]
    val_examples: list[Example]


def build(cfg: Config) -> Components:
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    seed_everything(cfg.trainer.seed)
    device = pick_device(cfg.trainer.device)
    resolve_data_files(cfg)
    for f in [*cfg.data.train_files, *cfg.data.val_files]:
        if not Path(f).is_file():  # fail before the minute-long model load
            raise FileNotFoundError(f"data file not found: {f}")
    t0 = time.perf_counter()
    model, tokenizer = load_model(
        cfg.model.path, device, cfg.model.dtype, cfg.model.cache_dir, cfg.trainer.seed
    )
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_lora(model, cfg.model.lora_rank, cfg.model.lora_alpha, cfg.model.target_modules)
    log.info("model %s loaded in %.1fs", cfg.model.path, time.perf_counter() - t0)
    train = load_examples(cfg.data.train_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    val = load_examples(cfg.data.val_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    return Components(model, tokenizer, device, train, val)


def make_run_dir(cfg: Config) -> Path:
    if cfg.trainer.default_local_dir:
        return Path(cfg.trainer.default_local_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.trainer.experiment_name}-{stamp}"
