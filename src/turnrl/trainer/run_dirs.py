"""A `turnrl train` run directory, or one of its checkpoints, read back as a model.

`model.path` may name a training run (`runs/x`, its newest sound checkpoint) or a checkpoint
(`runs/x/checkpoints/step_N`). The commands that assemble a run (train, eval, sft, rm, serve and
export itself) resolve such a path here, before any model loads, to a plain Hugging Face directory:
the checkpoint's policy exported once into the model cache, as `turnrl export` writes it. The model
loader below never exports; it reads Hugging Face directories, GGUF files, Hub ids and the `model/`
directory an `sft` / `rm` run writes. The policy is rebuilt the way the run built it (`model.path`,
the run's seed, LoRA merged into the base), so the directory needs transformers alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import torch

from turnrl.config import Config, load_config
from turnrl.errors import TurnrlInputError
from turnrl.models import sources
from turnrl.models.loader import cache_root
from turnrl.models.policy import build_policy
from turnrl.models.save import write_model_dir
from turnrl.trainer import checkpoint
from turnrl.workers.state import load_weights

CPU = torch.device("cpu")


class ExportError(TurnrlInputError):
    """A run directory, checkpoint step or output directory that cannot be exported; names the path."""


def is_training_run(p: Path) -> bool:
    """A training run or checkpoint directory: a model only once exported (an `sft` / `rm` run
    writes its model as `model/`, which the loader reads as it is)."""
    if (p / "config.json").is_file() or (p / "model" / "config.json").is_file():
        return False
    return sources.is_run_dir(p) or sources.is_checkpoint_dir(p)


def resolve_model_path(path: str, cache_dir: str = "") -> str:
    """`path` itself, unless it names a training run or checkpoint: then the Hugging Face directory
    of that checkpoint's policy (the run's newest sound one), exported into the cache once."""
    p = Path(path).expanduser()
    if not path or not p.is_dir() or not is_training_run(p):
        return path
    if sources.is_checkpoint_dir(p):
        run_dir, step = p.parent.parent, int(p.name.removeprefix("step_"))
    else:
        latest = checkpoint.latest(p)
        if latest is None:
            raise ExportError(f"run directory {p} has no usable checkpoint to load a model from")
        run_dir, step = p, int(latest.name.removeprefix("step_"))
    return str(exported(run_dir, step, cache_root(cache_dir)))


def resolve_model_paths(cfg: Config) -> Config:
    """A copy of `cfg` whose policy, critic and teacher paths are loadable (see `resolve_model_path`).
    The run keeps the paths as given in its own config; its roles build from the copy."""
    model = dataclasses.replace(cfg.model, path=resolve_model_path(cfg.model.path, cfg.model.cache_dir))
    critic_path = resolve_model_path(cfg.critic.model.path, cfg.model.cache_dir)
    critic = dataclasses.replace(cfg.critic, model=dataclasses.replace(cfg.critic.model, path=critic_path))
    teacher_path = resolve_model_path(cfg.teacher.model.path, cfg.model.cache_dir)
    teacher_model = dataclasses.replace(cfg.teacher.model, path=teacher_path)
    teacher = dataclasses.replace(cfg.teacher, model=teacher_model)
    return dataclasses.replace(cfg, model=model, critic=critic, teacher=teacher)


def exported(run_dir: Path, step: int, root: Path) -> Path:
    """`turnrl export` of `run_dir`'s step under `root/exports`, keyed by the checkpoint's path and
    manifest (a checkpoint rewritten in place gets a new export)."""
    ckpt = (run_dir / "checkpoints" / f"step_{step}").resolve()
    manifest = ckpt / "manifest.json"
    stamp = manifest.read_bytes() if manifest.is_file() else str(ckpt.stat().st_mtime_ns).encode()
    key = hashlib.sha256(str(ckpt).encode() + stamp).hexdigest()[:16]
    out = root / "exports" / f"{run_dir.name}-step_{step}-{key}"
    if not (out / "config.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        export_policy(run_dir, out, step)
    return out


def export_policy(run_dir: str | Path, out: str | Path, step: int | None = None) -> Path:
    """Write the policy of `run_dir`'s checkpoint `step` (default: the latest) into `out`, which must
    not exist or be empty; returns `out`."""
    cfg, role = read_checkpoint(Path(run_dir), Path(out), step, "actor")
    model, tokenizer = rebuild_policy(cfg, role)
    return write_model_dir(model, tokenizer, Path(out))


def read_checkpoint(run_dir: Path, out: Path, step: int | None, role: str) -> tuple[Config, Path]:
    """The run's config and the directory of `role`'s state in checkpoint `step`, with every reason
    an export of it into `out` cannot start checked first."""
    if not (run_dir / "config.yaml").is_file():
        what = "has no config.yaml" if run_dir.is_dir() else "does not exist"
        what = "is not a directory" if run_dir.is_file() else what
        raise ExportError(f"run directory {run_dir} {what}; pass the directory `turnrl train` wrote")
    ckpt = checkpoint_of(run_dir, step)
    state = ckpt / role
    if not state.is_dir():
        hint = " (the run had critic.enable=false)" if role == "critic" else ""
        raise ExportError(f"checkpoint {ckpt} has no {role} state{hint}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"output directory {out} exists and is not an empty directory; choose a new path")
    return load_config(run_dir / "config.yaml"), state


def checkpoint_of(run_dir: Path, step: int | None) -> Path:
    found = checkpoint.steps(run_dir)
    if not found:
        raise ExportError(f"run directory {run_dir} has no checkpoint under {run_dir / 'checkpoints'}")
    if step is None:
        if (path := checkpoint.latest(run_dir)) is not None:
            return path
        newest = found[max(found)]  # every one fails its manifest: a load would read a corrupt file
        problem = checkpoint.manifest_problem(newest)
        raise ExportError(f"checkpoint {newest} is corrupt ({problem}), and so is every other checkpoint of {run_dir}")  # fmt: skip
    if step not in found:
        listed = ", ".join(map(str, found))
        raise ExportError(f"no checkpoint step_{step} in {run_dir / 'checkpoints'}; steps: {listed}")
    if problem := checkpoint.manifest_problem(found[step]):
        raise ExportError(f"checkpoint {found[step]} is corrupt: {problem}")
    return found[step]


def export_dtype(model_dtype: str, weights: Path) -> torch.dtype:
    """The run's `model.dtype`; for `auto`, the dtype the checkpoint stores its weights in
    (the model is rebuilt on the CPU, where `auto` would mean float32 whatever the run used)."""
    if model_dtype != "auto":
        return getattr(torch, model_dtype)
    if not weights.is_file():  # shards of N ranks hold the fp32 master weights
        return torch.float32
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        first = next(iter(f.keys()), None)
        return f.get_tensor(first).dtype if first else torch.float32


def rebuild_policy(cfg: Config, role: Path) -> tuple[torch.nn.Module, Any]:
    """The run's policy with the checkpoint's weights, LoRA merged: the run's own call with its
    seed gives the same base weights (tiny-random is seeded) and the same LoRA parameter names."""
    path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)  # a run trained from another run
    model_cfg = dataclasses.replace(cfg.model, path=path, gradient_checkpointing=False)
    model, tokenizer = build_policy(model_cfg, CPU, cfg.trainer.seed)
    load_weights(model, role)
    if cfg.model.lora_rank > 0:
        model = model.merge_and_unload()  # W + (alpha / r) B A: a plain transformers model again
    return model.to(export_dtype(cfg.model.dtype, role / "weights.safetensors")), tokenizer
