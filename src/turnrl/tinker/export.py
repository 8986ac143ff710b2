"""`turnrl export` of a `turnrl tinker serve` checkpoint: its LoRA adapter merged into the base model
it was trained on, written as a plain Hugging Face model directory.

    turnrl export STATE_ROOT/<run>/sampler_weights/<name> --out DIR
    turnrl export tinker://<run>/sampler_weights/<name> --state-root STATE_ROOT --out DIR

Either kind of checkpoint works (`weights` from `save_state` holds the same adapter, plus optimizer
state that an export has no use for). The base is rebuilt from what the checkpoint's `tinker.json`
recorded (`base`: the server's `--model`, a path made absolute, and the `--seed` that makes
'tiny-random'), the adapter is loaded by peft and merged (`W + alpha/r * B A`), and the model is
written in the dtype the server ran the base in. A base with tied input and output embeddings
whose output layer the adapter trains (the SDK's `train_unembed`, on by default) is untied first:
merging into a shared matrix would change the input embeddings too, so the export carries its own
output matrix and `tie_word_embeddings: false`.

Needs torch, transformers and peft, not the tinker SDK.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError
from turnrl.tinker.checkpoints import ADAPTER, META, SCHEME, StateRoot

ADAPTER_CONFIG = "adapter_config.json"
CPU = torch.device("cpu")


class ExportError(TurnrlInputError):
    """A tinker checkpoint, state root or output directory that cannot be exported; names the path."""


def is_checkpoint(path: str) -> bool:
    """Whether `path` names a tinker checkpoint: a tinker:// path, or a directory holding one."""
    if path.startswith(SCHEME):
        return True
    p = Path(path).expanduser()
    return (p / META).is_file() and (p / ADAPTER_CONFIG).is_file()


def checkpoint_dir(path: str, state_root: str | None) -> Path:
    """The directory of the checkpoint `path` names, or ExportError naming what is missing."""
    if not path.startswith(SCHEME):
        return Path(path).expanduser()
    if not state_root:
        raise ExportError(f"{path}: a tinker:// path needs --state-root DIR (the server's --state-root)")
    root = Path(state_root).expanduser()
    if not root.is_dir():
        raise ExportError(f"--state-root {state_root}: not a directory")
    try:
        ref = StateRoot(root).parse(path, "checkpoint")
    except ValueError as err:  # the server's Refusal: the path is malformed or leaves the root
        raise ExportError(str(err)) from None
    if not (ref.directory / META).is_file():
        raise ExportError(f"{path}: no checkpoint at {ref.directory}")
    return ref.directory


def export_checkpoint(path: str, out: str | Path, state_root: str | None = None, cache_dir: str = "") -> Path:
    """Write the checkpoint `path` names (a directory, or a tinker:// path under `state_root`),
    merged into its base model, into `out` (absent or empty); returns `out`."""
    from turnrl.models.save import write_model_dir

    directory, out = checkpoint_dir(path, state_root), Path(out)
    meta = _meta(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"output directory {out} exists and is not an empty directory; choose a new path")
    base = meta.get("base") or {}
    model, tokenizer = merged(directory, str(base.get("source") or meta["base_model"]), int(base.get("seed", 0)), cache_dir)  # fmt: skip
    dtype = getattr(torch, str(base.get("dtype", "float32")), None)
    if not isinstance(dtype, torch.dtype):
        raise ExportError(f"{directory / META}: base dtype {base.get('dtype')!r} is not a torch dtype")
    return write_model_dir(model.to(dtype), tokenizer, out)


def _meta(directory: Path) -> dict[str, Any]:
    if not (directory / ADAPTER_CONFIG).is_file() or not (directory / ADAPTER).is_file():
        raise ExportError(
            f"{directory}: not a turnrl tinker serve checkpoint (no {ADAPTER_CONFIG} and {ADAPTER})"
        )
    try:
        meta = json.loads((directory / META).read_text())
    except (OSError, ValueError) as err:
        raise ExportError(f"{directory / META}: cannot be read ({' '.join(str(err).split())})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("base_model"), str):
        raise ExportError(f"{directory / META}: names no base_model")
    return meta


def merged(directory: Path, source: str, seed: int, cache_dir: str = "") -> tuple[torch.nn.Module, Any]:
    """The base model (`source`, `seed`) on the CPU in float32 with the adapter in `directory`
    merged into it, and its tokenizer."""
    from peft import PeftModel

    from turnrl.models.loader import ModelError, load_model

    try:
        model, tokenizer = load_model(source, CPU, "float32", cache_dir, seed)
    except ModelError as err:
        raise ExportError(f"{directory}: its base model cannot be loaded ({err})") from None
    targets = json.loads((directory / ADAPTER_CONFIG).read_text()).get("target_modules") or []
    _untie_if_adapted(model, set(targets) if isinstance(targets, list) else {str(targets)})
    try:
        adapted = PeftModel.from_pretrained(model, str(directory))
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise ExportError(f"{directory}: the adapter does not fit {source} ({' '.join(str(err).split())[:200]})") from None  # fmt: skip
    return adapted.merge_and_unload().eval(), tokenizer


def _untie_if_adapted(model: torch.nn.Module, targets: set[str]) -> None:
    """Give the output layer its own copy of a weight it shares with the input embeddings, when
    the adapter is on it: the merge then changes the output layer alone."""
    out_layer, in_layer = model.get_output_embeddings(), model.get_input_embeddings()
    if out_layer is None or out_layer.weight is not in_layer.weight:
        return
    name = next(n for n, m in model.named_modules() if m is out_layer)
    if name not in targets and name.rsplit(".", 1)[-1] not in targets:
        return
    out_layer.weight = torch.nn.Parameter(out_layer.weight.detach().clone(), requires_grad=False)
    model.config.tie_word_embeddings = False
    text_config = getattr(model.config, "get_text_config", None)
    if callable(text_config):
        text_config().tie_word_embeddings = False
