"""What the GPU-marked tests run on: a CUDA device and tiny-random as a model directory.

A GPU machine may lack the embedded model's package (tiny-random borrows its tokenizer), so
`benchmarks/gpu_check.py --prepare DIR` saves tiny-random once, with its tokenizer, as a plain
Hugging Face directory, and `TURNRL_TINY_DIR` names it there; without it the tests use tiny-random
itself."""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = os.environ.get("TURNRL_GPU_TESTS_ON", "cuda")
"""Where the GPU-marked tests run: `cuda`, or `cpu` for a dry run of the same tests before a GPU is lent."""

needs_cuda = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="no CUDA device")


def tiny_path() -> str:
    """`model.path` of tiny-random: the prepared directory where one is named, else the name."""
    return os.environ.get("TURNRL_TINY_DIR") or "tiny-random"


def tiny_on(device: str, dtype: str = "float32") -> tuple[torch.nn.Module, object]:
    from turnrl.models.loader import load_model

    return load_model(tiny_path(), torch.device(device), dtype=dtype, seed=0)


def even_reward(tmp_path) -> str:
    """tests/support/tiny_runs.reward_file, reading the prepared directory's tokenizer where one is
    named (a GPU machine may not have the embedded model that tiny-random's tokenizer comes from)."""
    from pathlib import Path

    from tests.support.tiny_runs import reward_file

    tiny = os.environ.get("TURNRL_TINY_DIR")
    return reward_file(tmp_path, str(Path(tiny) / "tokenizer.json") if tiny else "")
