"""`turnrl export RUN_DIR [--step N] --out DIR [--critic]`: a checkpoint as a plain Hugging Face model.
(`turnrl export TINKER_CHECKPOINT --out DIR`: a `turnrl tinker serve` checkpoint, `tinker.export`.)

The policy is rebuilt the way the run built it (`model.path`, the run's seed, LoRA), the
checkpoint's weights are loaded into it and LoRA adapters are merged into the base, so the
directory needs transformers alone: `AutoModelForCausalLM.from_pretrained(DIR)`. `--critic`
writes the value model as `<Arch>ForTokenClassification` with one label: the per-token logits
are the per-token values, which is how TRL reads its value models.

Nothing is half-written: the directory is built under a temporary sibling name and renamed
into place when complete. The policy's export is `turnrl.trainer.run_dirs`'s, which also resolves
a run directory given as `model.path`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError
from turnrl.models.save import write_model_dir
from turnrl.runtime import ensure_writable_dir
from turnrl.trainer.run_dirs import (
    CPU,
    ExportError,
    export_dtype,
    export_policy,
    read_checkpoint,
    resolve_model_path,
)

__all__ = ["ExportError", "export", "register", "run"]


def export(run_dir: str | Path, out: str | Path, step: int | None = None, critic: bool = False) -> Path:
    """Write the actor (with `critic`, the value model) of `run_dir`'s checkpoint `step` (default:
    the latest) into `out`, which must not exist or be empty; returns `out`."""
    if not critic:
        return export_policy(run_dir, out, step)
    cfg, role = read_checkpoint(Path(run_dir), Path(out), step, "critic")
    model, tokenizer = _value_model(cfg, role)
    return write_model_dir(model, tokenizer, Path(out))


def _value_model(cfg: Any, role: Path) -> tuple[torch.nn.Module, Any]:
    from turnrl.models.loader import load_model
    from turnrl.workers.critic import ValueModel
    from turnrl.workers.state import load_weights

    source = resolve_model_path(cfg.critic.model.path or cfg.model.path, cfg.model.cache_dir)
    causal_lm, tokenizer = load_model(source, CPU, cfg.model.dtype, cfg.model.cache_dir, cfg.trainer.seed)
    value = ValueModel(causal_lm)
    load_weights(value, role, everything=True)
    model = _token_classifier(value, causal_lm.config, role)
    return model.to(export_dtype(cfg.model.dtype, role / "weights.safetensors")), tokenizer


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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's checkpoint as a plain Hugging Face model directory")
    p.add_argument(
        "run_dir",
        help="the run directory `turnrl train` wrote, or a `turnrl tinker serve` checkpoint "
        "(its directory, or its tinker:// path with --state-root)",
    )
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--out", required=True, help="directory to write; must not exist or be empty")
    p.add_argument("--critic", action="store_true", help="export the value model instead of the policy")
    p.add_argument(
        "--state-root",
        default=None,
        help="for a tinker:// path: the --state-root of the server that wrote it",
    )
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from turnrl.tinker import export as tinker_export

    try:
        ensure_writable_dir(Path(ns.out), "--out", ExportError)  # before the model is rebuilt
        if tinker_export.is_checkpoint(ns.run_dir):  # a LoRA adapter of `turnrl tinker serve`
            for flag, given in (("--step", ns.step is not None), ("--critic", ns.critic)):
                if given:
                    raise ExportError(f"{flag}: a tinker checkpoint holds one adapter; drop the flag")
            out = tinker_export.export_checkpoint(ns.run_dir, ns.out, ns.state_root)
        elif ns.state_root is not None:
            raise ExportError(f"--state-root: only for a tinker:// path; {ns.run_dir} is a run directory")
        else:
            out = export(ns.run_dir, ns.out, ns.step, ns.critic)
    except TurnrlInputError as err:
        print(f"turnrl export: {err}", file=sys.stderr)
        return 2
    print(f"exported to {out}")
    return 0
