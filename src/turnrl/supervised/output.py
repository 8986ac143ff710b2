"""`<run>/model/`: what a supervised run is for, as a plain Hugging Face directory.

SFT writes the causal LM, which `turnrl train model.path=<run>/model` starts RL from; RM writes
the `...ForSequenceClassification` model (one label, `pad_token_id` in its config), which
`reward_model.model.path=<run>/model` scores with. LoRA adapters are merged into the base, the
tokenizer carries the run's chat template, and `turnrl.models.save` does the writing (no GGUF
quantization config, built under a temporary name and renamed into place).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from turnrl.models.save import write_model_dir

MODEL_DIR = "model"


def write_model(model: torch.nn.Module, tokenizer: Any, run_dir: Path) -> Path:
    """Write `<run>/model/`, replacing the one an earlier end of the same run wrote."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()  # W + (alpha / r) B A; an RM's trained head replaces the original
    out = run_dir / MODEL_DIR
    old = run_dir / f".{MODEL_DIR}.old"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():  # kept until the new one is in place
        out.rename(old)
    write_model_dir(model.eval(), tokenizer, out)
    shutil.rmtree(old, ignore_errors=True)
    return out
