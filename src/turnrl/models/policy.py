"""The policy model as the actor builds it: `model.path` + gradient checkpointing + LoRA."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from turnrl.config.schema import ModelConfig
from turnrl.models.loader import apply_lora, load_model

log = logging.getLogger(__name__)


def build_policy(cfg: ModelConfig, device: torch.device, seed: int) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) of the policy; the same call rebuilds the base of a LoRA checkpoint."""
    t0 = time.perf_counter()
    model, tokenizer = load_model(cfg.path, device, cfg.dtype, cfg.cache_dir, seed)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.target_modules)
    log.info("model %s loaded in %.1fs", cfg.path, time.perf_counter() - t0)
    return model, tokenizer


def frozen_copy_of_start(cfg: ModelConfig, device: torch.device, seed: int) -> torch.nn.Module:
    """The start policy, frozen: what the reference is. Loaded without touching the global RNG,
    so building a reference never shifts the random numbers a run draws after it."""
    with torch.random.fork_rng(devices=[]):
        model, _ = load_model(cfg.path, device, cfg.dtype, cfg.cache_dir, seed)
    return model.eval().requires_grad_(False)
