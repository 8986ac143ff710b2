"""A model and its tokenizer written as a plain Hugging Face directory (`save_pretrained`), which
`turnrl export`, a run resolved as `model.path` and a supervised run's `<run>/model/` all write."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from turnrl.models.loader import drop_gguf_quantization


def write_model_dir(model: torch.nn.Module, tokenizer: Any, out: Path) -> Path:
    """`save_pretrained` of model and tokenizer into `out` (absent or empty), built under a temporary
    sibling name and renamed into place when complete: nothing is half-written. A base converted
    from GGUF was dequantised on load, so no GGUF quantization config is written."""
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
