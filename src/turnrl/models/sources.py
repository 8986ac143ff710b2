"""The forms of `model.path` beyond a Hugging Face directory and a `.gguf` file.

- **A Hub id** (`Qwen/Qwen2.5-0.5B-Instruct`): resolved through the standard Hugging Face cache
  (`HF_HOME` / `HF_HUB_CACHE`), downloaded when online as every peer framework does; offline and
  not cached, one line says so and how to fetch it.
- **A turnrl run directory**: `<run>/model/` when the run wrote one (`turnrl sft`, `turnrl rm`),
  else its latest checkpoint exported once into the cache (`turnrl export`).
- **A checkpoint directory** (`<run>/checkpoints/step_N`): that step, exported the same way.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from turnrl.errors import TurnrlInputError

# what a model needs: weights, configs, tokenizer files; not the .bin / .pth / .gguf duplicates many
# Hub repos also hold
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(path: str) -> bool:
    """`org/name`, not a path that could be meant as a local one (`./x`, `/x`, `a/b/c`, `~`)."""
    return bool(HUB_ID.match(path)) and not path.startswith((".", "~")) and ".." not in path


def hub_snapshot(repo_id: str, error: type[TurnrlInputError]) -> Path:
    """The cached snapshot of `repo_id` (downloaded first when missing and the Hub is reachable)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:  # the cache first: no network call at all when the model is there
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    fetch = f"fetch it where the Hub is reachable with `hf download {repo_id}` (same HF_HOME)"
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false"):
        raise error(f"model '{repo_id}' is not in the Hugging Face cache and HF_HUB_OFFLINE is set; {fetch}")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))
    except RepositoryNotFoundError:
        raise error(
            f"model path '{repo_id}' is neither a local path nor a model on the Hugging Face Hub"
        ) from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise error(
            f"model '{repo_id}' is not in the Hugging Face cache and cannot be downloaded ({first}); {fetch}"
        ) from None


def is_run_dir(p: Path) -> bool:
    return (p / "config.yaml").is_file() and ((p / "checkpoints").is_dir() or (p / "model").is_dir())


def is_checkpoint_dir(p: Path) -> bool:
    return (p / "trainer_state.json").is_file() and (p / "actor").is_dir()


def run_model_dir(p: Path, cache_root: Path) -> Path:
    """A Hugging Face directory for a turnrl run or checkpoint directory `p`."""
    if (p / "model" / "config.json").is_file():
        return p / "model"
    if is_checkpoint_dir(p):
        run_dir, step = p.parent.parent, int(p.name.removeprefix("step_"))
    else:
        from turnrl.trainer import checkpoint

        latest = checkpoint.latest(p)
        if latest is None:
            from turnrl.export import ExportError

            raise ExportError(f"run directory {p} has no usable checkpoint to load a model from")
        run_dir, step = p, int(latest.name.removeprefix("step_"))
    return exported(run_dir, step, cache_root)


def exported(run_dir: Path, step: int, cache_root: Path) -> Path:
    """`turnrl export` of `run_dir`'s step, cached under a key of the checkpoint's path and manifest
    (a checkpoint rewritten in place gets a new export)."""
    from turnrl.export import export

    ckpt = (run_dir / "checkpoints" / f"step_{step}").resolve()
    manifest = ckpt / "manifest.json"
    stamp = manifest.read_bytes() if manifest.is_file() else str(ckpt.stat().st_mtime_ns).encode()
    key = hashlib.sha256(str(ckpt).encode() + stamp).hexdigest()[:16]
    out = cache_root / "exports" / f"{run_dir.name}-step_{step}-{key}"
    if not (out / "config.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        export(run_dir, out, step)
    return out
