"""Teachers for on-policy distillation tests: tiny models with tiny-random's tokenizer and other weights,
and tokenizer directories that differ from it in one known place."""

from __future__ import annotations

from pathlib import Path

import torch


def tiny_teacher(out: Path, seed: int = 7) -> str:
    """A Hugging Face directory of tiny-random built with `seed` (the runs build theirs with
    `trainer.seed`, 1 by default): the same tokenizer and architecture, other weights."""
    from turnrl.models.loader import load_model
    from turnrl.models.save import write_model_dir

    if not (out / "config.json").is_file():
        model, tokenizer = load_model("tiny-random", torch.device("cpu"), seed=seed)
        write_model_dir(model, tokenizer, out)
    return str(out)


def tokenizer_dir(out: Path, extra_token: str = "", eos: str = "") -> str:
    """tiny-random's tokenizer saved into `out`, with one added token or another EOS token: a teacher
    directory whose tokenizer check fails (the check reads the tokenizer and config.json, no weights:
    it runs before any model loads)."""
    from turnrl.models.loader import load_tokenizer, tiny_random_config

    tok = load_tokenizer("tiny-random")
    if extra_token:
        tok.add_tokens([extra_token])
    if eos:
        tok.eos_token = eos
    tok.save_pretrained(out)
    tiny_random_config(len(tok), tok).save_pretrained(out)
    return str(out)
