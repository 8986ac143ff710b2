"""What the inference-server tests send and how they check it: prompts, a plain forward's
log-probs, and putting a server back to the start policy."""

from __future__ import annotations

from pathlib import Path

import httpx
import torch

from turnrl.models.weights_dir import write_weights_dir
from turnrl.servers.inference.launcher import ServeProcess

EQ, TIME, CAPITAL = [33, 1232, 216, 33, 446], [6403, 1980, 253, 655], [504, 3575, 282, 4649, 314]


def recomputed(model, prompt: list[int], ids: list[int], temperature: float) -> torch.Tensor:
    """log p(id) at `temperature` from one plain forward over prompt + response."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    scaled = logits / (temperature if temperature > 0 else 1.0)
    return torch.log_softmax(scaled, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


def load_start_weights(server: ServeProcess, tiny, tmp_path: Path) -> None:
    """Put `server` back to the start policy (tiny-random seed 0, version 0)."""
    path = write_weights_dir(tiny[0].state_dict(), tmp_path / "start")
    body = {"model_path": str(path), "policy_version": 0}
    assert httpx.post(server.url + "/update_weights_from_disk", json=body).json()["policy_version"] == 0
