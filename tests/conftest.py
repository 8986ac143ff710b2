"""Shared fixtures: the tiny random model (same family and tokenizer as the embedded one)."""

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny():
    import torch

    from turnrl.models.loader import load_model

    model, tokenizer = load_model("tiny-random", torch.device("cpu"), seed=0)
    return model, tokenizer
