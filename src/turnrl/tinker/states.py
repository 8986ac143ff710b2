"""A training client's state: creating its adapter and optimizer, saving both under the state root
(`save_state`, `save_weights_for_sampler`), loading them back (`load_state`, and a new client from a
checkpoint), and the adapters of sampling sessions. Runs on the worker thread.

A checkpoint is written as `checkpoints` describes it: a peft adapter directory, `optimizer.pt`
(torch's AdamW `state_dict`, whose per-parameter state is ordered as `Backbone.parameters` orders
the adapter's tensors) and `tinker.json`. Loading checks it was made on the served base model with
the same LoRA layout, and refuses in one line otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from turnrl.servers.refusal import Refusal
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.checkpoints import (
    ADAPTER,
    OPTIMIZER,
    CheckpointRef,
    checkpoint_meta,
    now_iso,
    write_checkpoint,
)
from turnrl.tinker.registry import LoraSpec, TrainingModel
from turnrl.tinker.training import new_optimizer


def create_adapter(backbone: Backbone, model: TrainingModel, lora: LoraSpec) -> None:
    """The client's fresh adapter (the model is then the base model) and its optimizer."""
    model.lora = lora
    backbone.add_adapter(model.adapter, backbone.lora_config(lora), seed=lora.seed)
    model.optimizer = new_optimizer(backbone, model)
    model.ready = True


def _write(backbone: Backbone, model: TrainingModel, with_optimizer: bool, user_metadata: Any):
    """The function that fills a checkpoint directory with `model`'s adapter (and optimizer)."""

    def fill(directory: Path) -> None:
        import json

        from safetensors.torch import save_file

        backbone.config(model.adapter).save_pretrained(str(directory))
        save_file(backbone.state(model.adapter), str(directory / ADAPTER))
        if with_optimizer:
            torch.save(model.optimizer.state_dict(), directory / OPTIMIZER)
        meta = {
            "base_model": model.base_model,
            "base": backbone.base_info(),
            "model_id": model.model_id,
            "lora": model.lora.as_dict(),
            "steps": model.steps,
            "created": now_iso(),
            "user_metadata": user_metadata,
        }
        (directory / "tinker.json").write_text(json.dumps(meta, indent=1))

    return fill


def save_state(
    backbone: Backbone, model: TrainingModel, ref: CheckpointRef, overwrite: bool, user_metadata: Any
) -> dict[str, Any]:
    """`save_state`: adapter and optimizer at `ref` (a `weights` checkpoint)."""
    write_checkpoint(ref, overwrite, _write(backbone, model, True, user_metadata))
    return {"path": ref.tinker_path, "type": "save_weights"}


def save_sampler_weights(
    backbone: Backbone, model: TrainingModel, ref: CheckpointRef, user_metadata: Any
) -> None:
    """`save_weights_for_sampler(name)`: the adapter alone at `ref` (a `sampler_weights` checkpoint)."""
    write_checkpoint(ref, True, _write(backbone, model, False, user_metadata))


def _checked_meta(backbone: Backbone, ref: CheckpointRef, field: str) -> tuple[LoraSpec, dict[str, Any]]:
    meta = checkpoint_meta(ref, field)
    if meta.get("base_model") != backbone.name:
        trained_on = meta.get("base_model")
        raise Refusal(
            f"{field}: {ref.tinker_path} was trained on {trained_on!r}; this server serves {backbone.name!r}"
        )
    try:
        return LoraSpec(**meta["lora"]), meta
    except (KeyError, TypeError):
        raise Refusal(f"{field}: {ref.tinker_path} has no LoRA settings in its tinker.json") from None


def _load_adapter(backbone: Backbone, adapter: str, ref: CheckpointRef, field: str) -> None:
    from safetensors.torch import load_file

    try:
        state = load_file(str(ref.directory / ADAPTER), device=str(backbone.device))
    except (OSError, ValueError, RuntimeError) as err:
        raise Refusal(f"{field}: cannot load the adapter of {ref.tinker_path} ({' '.join(str(err).split())[:200]})") from None  # fmt: skip
    # a diverged run's weights (an older server saved them) would make every output NaN
    bad = next((k for k, t in state.items() if t.is_floating_point() and not torch.isfinite(t).all()), None)
    if bad is not None:
        raise Refusal(f"{field}: the adapter of {ref.tinker_path} holds NaN or infinite weights ({bad}); it cannot be loaded")  # fmt: skip
    try:
        backbone.load_state(adapter, state)
    except (OSError, ValueError, RuntimeError) as err:
        raise Refusal(f"{field}: cannot load the adapter of {ref.tinker_path} ({' '.join(str(err).split())[:200]})") from None  # fmt: skip


def _load_optimizer(backbone: Backbone, model: TrainingModel, ref: CheckpointRef, field: str) -> None:
    path = ref.directory / OPTIMIZER
    if not path.is_file():
        raise Refusal(f"{field}: {ref.tinker_path} holds no optimizer state (save it with save_state)")
    try:
        state = torch.load(path, map_location=backbone.device, weights_only=True)
        model.optimizer.load_state_dict(state)
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise Refusal(f"{field}: cannot load the optimizer state of {ref.tinker_path} ({' '.join(str(err).split())[:200]})") from None  # fmt: skip


def create_from_state(
    backbone: Backbone, model: TrainingModel, ref: CheckpointRef, with_optimizer: bool
) -> dict[str, Any]:
    """A new client from a `save_state` checkpoint: its LoRA layout, weights and (if asked) its
    optimizer state; otherwise a fresh optimizer."""
    lora, meta = _checked_meta(backbone, ref, "path")
    create_adapter(backbone, model, lora)
    _load_adapter(backbone, model.adapter, ref, "path")
    if with_optimizer:
        _load_optimizer(backbone, model, ref, "path")
    model.steps = int(meta.get("steps", 0))
    return {"path": ref.tinker_path, "model_id": model.model_id, "type": "load_weights"}


def load_state(
    backbone: Backbone, model: TrainingModel, ref: CheckpointRef, with_optimizer: bool
) -> dict[str, Any]:
    """`load_state` into an existing client: the checkpoint must have the client's LoRA layout. The
    optimizer state is the checkpoint's with `with_optimizer`, a fresh one otherwise; gradients
    accumulated before are dropped."""
    lora, meta = _checked_meta(backbone, ref, "path")
    if lora.as_dict() | {"seed": None} != model.lora.as_dict() | {"seed": None}:
        raise Refusal(
            f"path: {ref.tinker_path} has LoRA settings {lora.as_dict()}, this client {model.lora.as_dict()}; "
            f"create a new client from it (ServiceClient.create_training_client_from_state)"
        )
    _load_adapter(backbone, model.adapter, ref, "path")
    model.optimizer = new_optimizer(backbone, model)
    if with_optimizer:
        _load_optimizer(backbone, model, ref, "path")
    model.steps = int(meta.get("steps", 0))
    return {"path": ref.tinker_path, "model_id": model.model_id, "type": "load_weights"}


def snapshot(backbone: Backbone, model: TrainingModel, adapter: str) -> None:
    """A sampler's frozen copy of the client's adapter as it is now."""
    backbone.copy_adapter(model.adapter, adapter)


def open_checkpoint(backbone: Backbone, ref: CheckpointRef, adapter: str, field: str) -> None:
    """A sampler's adapter read from a checkpoint (either kind: both hold the adapter)."""
    lora, _meta = _checked_meta(backbone, ref, field)
    backbone.add_adapter(adapter, backbone.lora_config(lora))
    try:
        _load_adapter(backbone, adapter, ref, field)
    except Refusal:
        backbone.remove_adapter(adapter)
        raise
