"""What `turnrl eval` reads, checked before any model loads: the config, the model path, the data
files and the output directory. Every problem is one `TurnrlInputError` line."""

from __future__ import annotations

import re
import time
from pathlib import Path

from turnrl.config import Config, ConfigError, load_config
from turnrl.config.checks import check_path_length
from turnrl.config.loader import read_recipe
from turnrl.data.dataset import check_data_file
from turnrl.errors import TurnrlInputError
from turnrl.models import sources
from turnrl.runtime import ensure_writable_dir
from turnrl.trainer import checkpoint
from turnrl.trainer.setup import resolve_data_files


class EvalError(TurnrlInputError):
    """An output directory or run directory `turnrl eval` cannot use; the message names it."""


def train_run_of(path: Path) -> Path | None:
    """The `turnrl train` run that `path` (a run directory or one of its checkpoints) belongs to, or
    None. `turnrl sft` / `rm` runs write `model/` and a config of another schema: not theirs."""
    run = path.parent.parent if sources.is_checkpoint_dir(path) else path
    if not (run / "config.yaml").is_file() or (run / "model" / "config.json").is_file():
        return None
    try:
        tree = read_recipe(run / "config.yaml")
    except ConfigError:
        return None
    return run if "rollout" in tree and "algorithm" in tree else None


def eval_config(recipe: str | None, overrides: list[str]) -> tuple[Config, Path | None]:
    """The config to evaluate with, and the run whose `config.yaml` it starts from. With no recipe
    and `model.path` in a `turnrl train` run, that run's own config is the base (its task, data,
    lengths, agent tools, reward), then the overrides: evaluating a run needs nothing but its path."""
    run = None
    if recipe is None:
        probe = load_config(None, overrides, check=None)  # only to read model.path
        check_path_length("model.path", probe.model.path)  # read on the disk just below
        run = train_run_of(Path(probe.model.path).expanduser())
    cfg = load_config(run / "config.yaml" if run else recipe, overrides)
    check_eval(cfg)
    path = Path(cfg.model.path).expanduser()
    if train_run_of(path) == path and checkpoint.latest(path) is None:  # found now, not mid-export
        raise EvalError(
            f"run directory {path} has no usable checkpoint to evaluate (none under {path / 'checkpoints'}); "
            "evaluate a run that saved one (it saves at its end, and every trainer.save_freq steps)"
        )
    return cfg, run


def check_eval(cfg: Config) -> None:
    e = cfg.eval
    # each setting's range is checked with the rest of the config (declared on the schema's fields)
    if not e.greedy and e.n == 0:
        raise ConfigError("nothing to evaluate: eval.greedy=false and eval.n=0; enable one of the passes")
    if e.n > 0 and e.temperature <= 0:
        raise ConfigError(
            f"eval.temperature={e.temperature} must be > 0 for the sampled pass; "
            "greedy responses are the greedy pass (eval.greedy=true), or set eval.n=0"
        )


def eval_files(cfg: Config) -> list[str]:
    """`eval.files`, else `data.val_files`, else the validation split of the built-in `data.task`
    (written into the cache as training writes it); each checked to exist."""
    files, key = list(cfg.eval.files), "eval.files"
    if not files:
        if not cfg.data.val_files:
            resolve_data_files(cfg)
        files, key = list(cfg.data.val_files), "data.val_files"
    for f in files:
        check_data_file(f, key)  # before the model loads
    return files


def default_out_dir(cfg: Config, run: Path | None) -> Path:
    """`evals/<model name>-<time>`: a run's name (with the step for a checkpoint), else the last
    part of `model.path`."""
    path = Path(cfg.model.path)
    if run is not None and path.resolve() != run.resolve():
        name = f"{run.name}-{path.name}"  # a checkpoint: <run>-step_N
    else:
        name = path.stem if path.suffix == ".gguf" else path.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"
    base = Path("evals") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, i = base, 1
    while out.exists():  # two evaluations within a second
        i += 1
        out = base.with_name(f"{base.name}-{i}")
    return out


def check_out_dir(out: Path) -> Path:
    """`out` must be new or an empty directory, and writable: an evaluation never mixes its files
    with another's."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is a file" if not out.is_dir() else "exists and is not empty"
        raise EvalError(f"output directory {out} {what}; choose a new --out path")
    return ensure_writable_dir(out, "--out", EvalError)
