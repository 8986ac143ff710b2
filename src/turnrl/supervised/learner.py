"""The one role of a supervised run: the model, its optimizer, and their state on disk.

What a row is, which model is built and what a micro-batch's loss is are the objective's
(`sft.py`, `rm.py`); the learner runs a step as gradient accumulation over micro-batches with one
optimizer step (`turnrl.workers.optim.Optimizer`: AdamW, warm-up, clipping, non-finite steps
skipped), and saves and loads like every RL role (`turnrl.workers.state`). The micro-batches' forward
passes compute in `model.compute_dtype` as the RL roles' do: bfloat16 autocast over float32 master
weights where the device multiplies bfloat16 natively (`auto`), exact float32 elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from turnrl.config.schema import ModelConfig, OptimConfig
from turnrl.models.loader import resolve_dtype
from turnrl.models.precision import compute_dtype, computing_in
from turnrl.supervised.batches import chunks
from turnrl.workers.optim import Optimizer
from turnrl.workers.state import load_role, save_role


class Objective(Protocol):
    name: str
    """Metric prefix and checkpoint sub-directory: `sft` or `rm`."""

    def load(self, files: list[str]) -> list[Any]: ...

    def length(self, example: Any) -> int:
        """Tokens the example costs in a forward pass (what length grouping sorts by)."""
        ...

    def build(self, device: torch.device, seed: int) -> torch.nn.Module: ...

    def units(self, examples: list[Any]) -> int:
        """The count the whole step's loss is normalised by."""
        ...

    def loss(
        self, model: Any, examples: list[Any], units: int, device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """A micro-batch's share of the step's loss, and its sums for the metrics."""
        ...

    def metrics(self, sums: dict[str, float], units: int) -> dict[str, float]: ...


class Learner:
    def __init__(
        self,
        objective: Objective,
        model_cfg: ModelConfig,
        optim: OptimConfig,
        micro_batch_size: int,
        device: torch.device,
        seed: int,
        total_steps: int = 0,
    ):
        """`total_steps`: the run's optimizer steps, over which `optim.lr_decay` decays."""
        self.objective, self.model_cfg, self.micro_batch_size = objective, model_cfg, micro_batch_size
        self.device = device
        # an unknown or unsupported `model.compute_dtype` is one line before the model loads
        self.compute = compute_dtype(model_cfg.compute_dtype, resolve_dtype(model_cfg.dtype, device), device)
        self.model = objective.build(device, seed)
        self.optim = Optimizer(self.model, optim, name=objective.name, total_steps=total_steps)

    def train_step(self, batch: list[Any]) -> dict[str, float]:
        """One optimizer step on `batch`, accumulated over its micro-batches."""
        self.model.train()
        self.optim.zero_grad()
        units = max(self.objective.units(batch), 1)
        sums: dict[str, float] = {}
        finite = True
        for micro in chunks(batch, self.micro_batch_size):
            with computing_in(self.compute, self.device):
                loss, stats = self.objective.loss(self.model, micro, units, self.device)
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
            _add(sums, stats)
        out = self.optim.step(finite)
        if finite:
            name = self.objective.name
            out.update({f"{name}/{k}": v for k, v in self.objective.metrics(sums, units).items()})
            out.update(_padding(sums))
        return out

    @torch.no_grad()
    def evaluate(self, examples: list[Any]) -> dict[str, float]:
        """`val/<name>/*` over `examples`, normalised over all of them as one step would be."""
        self.model.eval()
        units = max(self.objective.units(examples), 1)
        sums: dict[str, float] = {}
        for micro in chunks(examples, self.micro_batch_size):
            with computing_in(self.compute, self.device):
                _add(sums, self.objective.loss(self.model, micro, units, self.device)[1])
        name = self.objective.name
        return {f"val/{name}/{k}": v for k, v in self.objective.metrics(sums, units).items()}

    def save(self, directory: Path) -> None:
        """Trainable weights (LoRA: adapters, and an RM's head), optimizer + schedule, RNG streams."""
        info = {
            "role": self.objective.name,
            "model": self.model_cfg.path,
            "lora_rank": self.model_cfg.lora_rank,
        }
        save_role(directory, info, self.model, self.optim)

    def load(self, directory: Path) -> None:
        load_role(directory, self.objective.name, self.model, self.optim)


def _add(sums: dict[str, float], stats: dict[str, float]) -> None:
    for k, v in stats.items():
        sums[k] = sums.get(k, 0.0) + v


def _padding(sums: dict[str, float]) -> dict[str, float]:
    """What the step's forward passes cost in tokens, and the share of it that was padding."""
    real, padded = sums.get("real_tokens", 0.0), sums.get("padded_tokens", 0.0)
    return {"perf/total_num_tokens": real, "perf/pad_fraction": 1.0 - real / padded if padded else 0.0}
