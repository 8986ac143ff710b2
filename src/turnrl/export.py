"""`turnrl export RUN_DIR [--step N] --out DIR [--critic]`: a checkpoint as a plain Hugging Face model.

The policy is rebuilt the way the run built it (`model.path`, the run's seed, LoRA), the
checkpoint's weights are loaded into it and LoRA adapters are merged into the base, so the
directory needs transformers alone: `AutoModelForCausalLM.from_pretrained(DIR)`. `--critic`
writes the value model as `<Arch>ForTokenClassification` with one label: the per-token logits
are the per-token values, which is how TRL reads its value models.

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
from turnrl.models.loader import drop_gguf_quantization

CPU = torch.device("cpu")


class ExportError(TurnrlInputError):
    """A run directory, checkpoint step or output directory that cannot be exported; names the path."""


def export(run_dir: str | Path, out: str | Path, step: int | None = None, critic: bool = False) -> Path:
    """Write the actor (with `critic`, the value model) of `run_dir`'s checkpoint `step` (default:
    the latest) into `out`, which must not exist or be empty; returns `out`."""
    from turnrl.config import load_config

    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "config.yaml").is_file():
        what = "has no config.yaml" if run_dir.is_dir() else "does not exist"
        what = "is not a directory" if run_dir.is_file() else what
        raise ExportError(f"run directory {run_dir} {what}; pass the directory `turnrl train` wrote")
    ckpt = _checkpoint(run_dir, step)
    role = ckpt / ("critic" if critic else "actor")
    if not role.is_dir():
        hint = " (the run had critic.enable=false)" if critic else ""
        raise ExportError(f"checkpoint {ckpt} has no {role.name} state{hint}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"output directory {out} exists and is not an empty directory; choose a new path")
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


def _export_dtype(model_dtype: str, weights: Path) -> torch.dtype:
    """The run's `model.dtype`; for `auto`, the dtype the checkpoint stores its weights in
    (the model is rebuilt on the CPU, where `auto` would mean float32 whatever the run used)."""
    if model_dtype != "auto":
        return getattr(torch, model_dtype)
    if not weights.is_file():  # shards of N ranks hold the fp32 master weights
        return torch.float32
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        first = next(iter(f.keys()), None)
        return f.get_tensor(first).dtype if first else torch.float32


def _policy(cfg: Any, role: Path) -> tuple[torch.nn.Module, Any]:
    from turnrl.models.policy import build_policy
    from turnrl.workers.state import load_weights

    # the run's own call, with its seed: the same base weights (tiny-random is seeded), the same
    # LoRA parameter names
    model_cfg = dataclasses.replace(cfg.model, gradient_checkpointing=False)
    model, tokenizer = build_policy(model_cfg, CPU, cfg.trainer.seed)
    load_weights(model, role)
    if cfg.model.lora_rank > 0:
        model = model.merge_and_unload()  # W + (alpha / r) B A: a plain transformers model again
    return model.to(_export_dtype(cfg.model.dtype, role / "weights.safetensors")), tokenizer


def _value_model(cfg: Any, role: Path) -> tuple[torch.nn.Module, Any]:
    from turnrl.models.loader import load_model
    from turnrl.workers.critic import ValueModel
    from turnrl.workers.state import load_weights

    source = cfg.critic.model.path or cfg.model.path
    causal_lm, tokenizer = load_model(source, CPU, cfg.model.dtype, cfg.model.cache_dir, cfg.trainer.seed)
    value = ValueModel(causal_lm)
    load_weights(value, role, everything=True)
    model = _token_classifier(value, causal_lm.config, role)
    return model.to(_export_dtype(cfg.model.dtype, role / "weights.safetensors")), tokenizer


def _token_classifier(value: torch.nn.Module, config: Any, role: Path) -> torch.nn.Module:
    """`ValueModel` -> `<Arch>ForTokenClassification(num_labels=1)`: the trunk under the class's
    base-model prefix (`model.` for Llama), the value head as its linear head (`score`)."""
    from transformers import AutoModelForTokenClassification

    config.num_labels = 1
    try:
        model = AutoModelForTokenClassification.from_config(config)
    except ValueError:  # "Unrecognized configuration class ..."
        raise ExportError(
            f"cannot export the critic of {role}: transformers has no token-classification class "
            f"for '{config.model_type}' models"
        ) from None
    prefix = model.base_model_prefix + "."
    head = sorted(k for k in model.state_dict() if not k.startswith(prefix))
    if len(head) != 2 or not (head[0].endswith(".bias") and head[1].endswith(".weight")):
        raise ExportError(f"cannot export the critic of {role}: {type(model).__name__} has head {head}")
    bias, weight = head
    state = {
        prefix + k.removeprefix("trunk."): v for k, v in value.state_dict().items() if k.startswith("trunk.")
    }
    state[weight], state[bias] = value.value_head.weight, value.value_head.bias
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ExportError(f"cannot export the critic of {role}: {str(err).splitlines()[0]}") from None
    return model.eval()


def _write(model: torch.nn.Module, tokenizer: Any, out: Path) -> Path:
    drop_gguf_quantization(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        model.save_pretrained(tmp)  # config.json with `architectures`, generation_config.json, safetensors
        tokenizer.save_pretrained(tmp)
        if out.is_dir():
            out.rmdir()  # empty (checked before); raises rather than overwrite if it filled since
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's checkpoint as a plain Hugging Face model directory")
    p.add_argument("run_dir", help="the run directory `turnrl train` wrote")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--out", required=True, help="directory to write; must not exist or be empty")
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
