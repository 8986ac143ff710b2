"""`rollout.engine` -> a RolloutEngine: `hf` (in-process), `server` (HTTP servers) or `vllm`.

It lives with the workers, not in `rollout/`, because `server` without URLs starts a
`turnrl serve` child (`turnrl.servers.inference`), and servers sit above the rollout engines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from turnrl.config.schema import RolloutConfig
from turnrl.models.weights_dir import write_weights_dir
from turnrl.rollout.base import RolloutEngine
from turnrl.rollout.hf import HFEngine, eos_ids

WeightsFn = Callable[[], dict[str, torch.Tensor]]


def compiles_decode(rollout_cfg: RolloutConfig, device: torch.device) -> bool:
    """`rollout.compile` resolved: `auto` compiles on a GPU for single-turn runs only. An agent's
    prompts grow every turn and its batches shrink as episodes end, so each turn would land in a
    new (batch, length) bucket and pay a new compile."""
    setting = str(rollout_cfg.compile).lower()
    if setting != "auto":
        return setting == "true"
    return device.type == "cuda" and not is_agent(rollout_cfg)


def is_agent(rollout_cfg: RolloutConfig) -> bool:
    """Multi-turn episodes: built-in tools, or an agent function, environment or process."""
    ac = rollout_cfg.agent
    return bool(rollout_cfg.multi_turn.enable or ac.entrypoint or ac.env or ac.command)


def build_engine(
    rollout_cfg: RolloutConfig,
    model: torch.nn.Module,
    tokenizer: Any,
    run_dir: str | Path,
    model_path: str,
    weights_fn: WeightsFn | None = None,
    *,
    dtype: str = "auto",
    cache_dir: str = "",
    seed: int = 0,
) -> RolloutEngine:
    """The run's rollout engine.

    `model`: the (unsharded) policy module; `hf` samples from it, `server` reads its vocab size,
    config and EOS ids. `run_dir`: where `server` writes synced weights (unless
    `rollout.server.weights_dir` is set) and its child server's log (`rollout_server.log`).
    `model_path`, `dtype`, `cache_dir`, `seed`: what the child server loads (`model.path`,
    `model.dtype`, `model.cache_dir`, `trainer.seed`; the seed builds the same `tiny-random`
    weights as the actor's). `weights_fn`: the actor's full HF-named state dict, read at each
    `sync_weights` (`server` only; without it the engine cannot sync).
    """
    if rollout_cfg.engine == "hf":
        return HFEngine(
            model,
            tokenizer,
            rollout_cfg.generation_batch_size,
            rollout_cfg.sync_every,
            rollout_cfg.kv_cache,
            compiles_decode(rollout_cfg, next(model.parameters()).device),
            rollout_cfg.dtype,
            rollout_cfg.share_prefix,
            rollout_cfg.prefix_cache_mb if is_agent(rollout_cfg) else 0,  # single-turn: nothing extends a row
        )
    if rollout_cfg.engine == "vllm":
        return _vllm_engine(model, tokenizer, Path(run_dir), weights_fn, dtype, seed)
    if rollout_cfg.engine != "server":
        raise ValueError(f"rollout.engine={rollout_cfg.engine!r}: use hf, server or vllm")
    return _server_engine(
        rollout_cfg,
        model,
        tokenizer,
        Path(run_dir),
        model_path,
        weights_fn,
        rollout_cfg.dtype or dtype,
        cache_dir,
        seed,
    )


def _vllm_engine(
    model: torch.nn.Module, tokenizer: Any, run_dir: Path, weights_fn: WeightsFn | None, dtype: str, seed: int
) -> RolloutEngine:
    from turnrl.rollout.vllm_engine import VLLMEngine

    if weights_fn is None:
        raise ValueError("rollout.engine=vllm needs the actor's weights_fn to sync weights")
    # vLLM loads a model directory; the run's start policy is written once, as the server engine does
    start = run_dir / "rollout_weights" / "start"
    if not start.exists():
        write_weights_dir(weights_fn(), start, model.config)
        tokenizer.save_pretrained(start)
    vllm_dtype = "bfloat16" if dtype == "auto" else dtype
    return VLLMEngine(str(start), eos_ids(model, tokenizer), weights_fn, vllm_dtype, seed=seed)


def _server_engine(
    rollout_cfg: RolloutConfig,
    model: torch.nn.Module,
    tokenizer: Any,
    run_dir: Path,
    model_path: str,
    weights_fn: WeightsFn | None,
    dtype: str,
    cache_dir: str,
    seed: int,
) -> RolloutEngine:
    """A ServerEngine over `rollout.server.urls`, or over one `turnrl serve` child it owns."""
    from turnrl.rollout.server import ServerEngine
    from turnrl.servers.inference.launcher import ServeProcess

    cfg = rollout_cfg.server
    urls, child = list(cfg.urls), None
    weights_dir = Path(cfg.weights_dir) if cfg.weights_dir else run_dir / "rollout_weights"
    if not urls:  # one `turnrl serve` child for this run, on the trainer's device unless configured
        device = cfg.device if cfg.device != "auto" else next(model.parameters()).device.type
        # the child loads weights only from where this engine writes them (and exists to be named)
        weights_dir.mkdir(parents=True, exist_ok=True)
        child = ServeProcess(
            model_path,
            device,
            dtype,
            cache_dir,
            run_dir / "rollout_server.log",
            cfg.startup_timeout_s,
            seed,
            weights_root=weights_dir,
        ).start()
        urls = [child.url]
    try:
        return ServerEngine(
            urls,
            cfg,
            eos_ids=eos_ids(model, tokenizer),
            vocab_size=int(model.config.vocab_size),
            weights=weights_fn,
            weights_dir=weights_dir,
            model_config=model.config,
            rows_per_request=rollout_cfg.generation_batch_size,
            child=child,
            api_key=None if child is None else child.api_key,  # the child's own random key
        )
    except BaseException:
        if child is not None:
            child.stop()
        raise
