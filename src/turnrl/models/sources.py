"""The forms of `model.path` beyond a Hugging Face directory and a `.gguf` file.

- **A Hub id** (`Qwen/Qwen2.5-0.5B-Instruct`): resolved through the standard Hugging Face cache
  (`HF_HOME` / `HF_HUB_CACHE`), downloaded when online as every peer framework does; offline and
  not cached, one line says so and how to fetch it.
- **A turnrl run directory**: `<run>/model/`, which `turnrl sft` and `turnrl rm` write.

A `turnrl train` run or checkpoint directory is a model only once exported: the commands resolve it
before a model loads (`turnrl.trainer.run_dirs`), and the loader names that way when handed one.
"""

from __future__ import annotations

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


def run_model_dir(p: Path, error: type[TurnrlInputError]) -> Path:
    """The Hugging Face directory of a turnrl run or checkpoint directory `p`: the `model/` an `sft`
    or `rm` run wrote. A training run's checkpoint is exported where a run is assembled, not here."""
    if (p / "model" / "config.json").is_file():
        return p / "model"
    raise error(
        f"model path '{p}' is a turnrl training run or checkpoint directory, whose policy the turnrl "
        f"commands export before loading it; in Python, pass it through "
        f"turnrl.trainer.run_dirs.resolve_model_path first, or run `turnrl export {p} --out DIR`"
    )
