"""Optional metric sinks: TensorBoard and Weights & Biases, used when named in `trainer.logger`.

Both packages are optional. A sink that is named but not installed stops the run at start-up
with one line naming the package, instead of failing (or silently logging nothing) mid-run.
"""

from __future__ import annotations

import importlib
import math
import os
import uuid
from pathlib import Path
from typing import Any, Protocol

from turnrl.errors import TurnrlInputError

# sink name -> the package it needs
OPTIONAL_SINKS: dict[str, str] = {"tensorboard": "tensorboard", "wandb": "wandb"}


class SinkUnavailable(TurnrlInputError):
    """A sink named in `trainer.logger` whose package is missing; the message says what to install."""


class Sink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def check_sinks(names: list[str]) -> None:
    """Raise SinkUnavailable for the first optional sink whose package cannot be imported."""
    for name in names:
        package = OPTIONAL_SINKS.get(name)
        if package is None:
            continue
        try:
            importlib.import_module(package)
        except ImportError:
            raise SinkUnavailable(
                f"trainer.logger names '{name}' but the '{package}' package is not installed: "
                f"pip install {package} (or remove '{name}' from trainer.logger)"
            ) from None


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics; the Tracker's 'inf'/'-inf' spellings become floats again."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, bool | int | float) or v in ("inf", "-inf", "nan"):
            out[k] = float(v)
    return out


class TensorBoardSink:
    """Event files in `<run>/tensorboard/`; view with `tensorboard --logdir <run>/tensorboard`."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = run_dir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, global_step=step)
        self.writer.flush()  # a killed run keeps every step it logged

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A wandb run in `<run>/wandb/`, offline unless WANDB_MODE or WANDB_API_KEY says otherwise.

    The wandb run id is kept in `<run>/wandb_run_id`, so a resumed turnrl run continues the same
    wandb run instead of starting a second one.
    """

    def __init__(self, run_dir: Path, project: str, name: str, config: dict[str, Any] | None):
        import wandb

        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        self.run = wandb.init(
            project=project,
            name=name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config or {},
            mode=mode,  # type: ignore[arg-type]
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = {k: v for k, v in metrics.items() if math.isfinite(v)}
        self.run.log(clean, step=step)

    def close(self) -> None:
        self.run.finish()


def make_sinks(
    names: list[str], run_dir: Path, project: str, experiment: str, config: dict[str, Any] | None
) -> list[Sink]:
    check_sinks(names)
    sinks: list[Sink] = []
    if "tensorboard" in names:
        sinks.append(TensorBoardSink(run_dir))
    if "wandb" in names:
        sinks.append(WandbSink(run_dir, project, experiment, config))
    return sinks
