"""`turnrl export RUN_DIR [--step N] --out DIR [--critic]`: a checkpoint as a plain Hugging Face model.

The policy is rebuilt the way the run built it (`model.path`, its seed, LoRA), its checkpoint
weights are loaded and LoRA adapters are merged into the base, so the directory needs
transformers alone: `AutoModelForCausalLM.from_pretrained(DIR)`. `--critic` writes the value
model as `<Arch>ForTokenClassification` with one label: per-token logits are per-token values,
the way TRL reads its value models.

Nothing is half-written: the directory is built under a temporary sibling name and renamed
into place when complete.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError

CPU = torch.device("cpu")


class ExportError(TurnrlInputError):
    """A run directory, checkpoint step or output directory that cannot be exported; names the path."""


def export(run_dir: str | Path, out: str | Path, step: int | None = None, critic: bool = False) -> Path:
    """Write the actor (or, with `critic`, the value model) of `run_dir`'s checkpoint `step`
    (default: the latest) into the new directory `out`; returns `out`."""
    from turnrl.config import load_config

    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "config.yaml").is_file():
        what = "has no config.yaml" if run_dir.is_dir() else "does not exist"
        raise ExportError(f"run directory {run_dir} {what}; pass the directory `turnrl train` wrote")
    ckpt = _checkpoint(run_dir, step)
    role = ckpt / ("critic" if critic else "actor")
    if not role.is_dir():
        raise ExportError(f"checkpoint {ckpt} has no {role.name} state (was critic.enable false in that run?)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"output directory {out} exists and is not empty; choose a new path")
    cfg = load_config(run_dir / "config.yaml")
    model, tokenizer = _value_model(cfg, role) if critic else _policy(cfg, role)
    return _write(model, tokenizer, out)


def _checkpoint(run_dir: Path, step: int | None) -> Path:
    from turnrl.trainer import checkpoint

    found = checkpoint.steps(run_dir)
    if not found:
        raise ExportError(f"run directory {run_dir} has no checkpoint under {run_dir / 'checkpoints'}")
    if step is None:
        return checkpoint.latest(run_dir) or found[max(found)]
    if step not in found:
        listed = ", ".join(map(str, found))
        raise ExportError(f"no checkpoint step_{step} in {run_dir / 'checkpoints'}; steps: {listed}")
    return found[step]


def _export_dtype(cfg_dtype: str, weights: Path) -> torch.dtype:
    """The run's `model.dtype`; for `auto`, the dtype the checkpoint stores its weights in."""
    if cfg_dtype != "auto":
        return getattr(torch, cfg_dtype)
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        first = next(iter(f.keys()), None)
        return f.get_tensor(first).dtype if first else torch.float32


def _policy(cfg: Any, role: Path) -> tuple[torch.nn.Module, Any]:
    from turnrl.models.policy import build_policy
    from turnrl.workers.state import load_weights

    model_cfg = dataclasses.replace(cfg.model, gradient_checkpointing=False)
    # the same call as the run's actor: same base weights (tiny-random is seeded), same LoRA names
    model, tokenizer = build_policy(model_cfg, CPU, cfg.trainer.seed)
    load_weights(model, role / "weights.safetensors")
    if cfg.model.lora_rank > 0:
        model = model.merge_and_unload()  # W + (alpha / r) B A: a plain transformers model again
    return model.to(_export_dtype(cfg.model.dtype, role / "weights.safetensors")), tokenizer


def _value_model(cfg: Any, role: Path) -> tuple[torch.nn.Module, Any]:
    from transformers import AutoModelForTokenClassification

    from turnrl.models.loader import load_model
    from turnrl.workers.critic import ValueModel
    from turnrl.workers.state import load_weights

    source = cfg.critic.model.path or cfg.model.path
    causal_lm, tokenizer = load_model(source, CPU, cfg.model.dtype, cfg.model.cache_dir, cfg.trainer.seed)
    value = ValueModel(causal_lm)
    load_weights(value, role / "weights.safetensors", everything=True)

    config = causal_lm.config
    config.num_labels = 1
    try:
        model = AutoModelForTokenClassification.from_config(config)
    except ValueError:  # "Unrecognized configuration class ..."
        raise ExportError(
            f"cannot export the critic of {role}: transformers has no token-classification class for "
            f"'{config.model_type}' models"
        ) from None
    prefix = model.base_model_prefix
    head = sorted(k for k in model.state_dict() if not k.startswith(prefix + "."))
    if [k.rsplit(".", 1)[-1] for k in head] != ["bias", "weight"]:
        raise ExportError(f"cannot export the critic of {role}: {type(model).__name__} has head {head}, not a linear layer")
    state = {f"{prefix}.{k.removeprefix('trunk.')}": v for k, v in value.state_dict().items() if k.startswith("trunk.")}
    state[head[0]], state[head[1]] = value.value_head.bias, value.value_head.weight
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ExportError(f"cannot export the critic of {role}: {str(err).splitlines()[0]}") from None
    dtype = _export_dtype(cfg.model.dtype, role / "weights.safetensors")
    return model.eval().to(dtype), tokenizer


def _drop_gguf_quantization(model: torch.nn.Module) -> None:
    """A base converted from GGUF keeps a GGUF `quantization_config` (and transformers refuses to
    save it), but its weights were dequantised to float on load: the export is a plain model."""
    quant = getattr(model.config, "quantization_config", None)
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    if str(getattr(method, "value", method)) == "gguf":
        del model.config.quantization_config
        model.hf_quantizer = None


def _write(model: torch.nn.Module, tokenizer: Any, out: Path) -> Path:
    _drop_gguf_quantization(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        model.save_pretrained(tmp)  # config.json (with architectures), generation_config.json, safetensors
        tokenizer.save_pretrained(tmp)
        if out.is_dir():
            out.rmdir()  # empty (checked before loading); fails rather than overwrite if it filled since
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's checkpoint as a plain Hugging Face model directory")
    p.add_argument("run_dir", help="the run directory `turnrl train` wrote")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--out", required=True, help="new (or empty) directory to write")
    p.add_argument("--critic", action="store_true", help="export the value model instead of the policy")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    try:
        out = export(ns.run_dir, ns.out, ns.step, ns.critic)
    except TurnrlInputError as err:
        print(f"turnrl export: {err}", file=sys.stderr)
        return 2
    print(f"exported to {out}")
    return 0
