"""What the inference-server tests send and how they check it: prompts, a plain forward's
log-probs, putting a server back to the start policy, and the key and weights root their servers
are started with."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import torch

from turnrl.models.weights_dir import write_weights_dir
from turnrl.servers.inference.launcher import ServeProcess

EQ, TIME, CAPITAL = [33, 1232, 216, 33, 446], [6403, 1980, 253, 655], [504, 3575, 282, 4649, 314]

KEY = secrets.token_urlsafe(16)
"""The key of every test server of a module (one key, so one ServerEngine can talk to several)."""
HEADERS = {"Authorization": f"Bearer {KEY}"}


def serve_process(weights_root: Path, **kw) -> ServeProcess:
    """tiny-random (seed 0) on the CPU in fp32, one torch thread, key `KEY`, weights from `weights_root`."""
    kw.setdefault("extra_args", ["--threads", "1"])
    return ServeProcess(
        "tiny-random",
        "cpu",
        "float32",
        startup_timeout_s=120,
        seed=0,
        weights_root=weights_root,
        api_key=KEY,
        **kw,
    )


def version_of(server: ServeProcess) -> int:
    return int(httpx.get(server.url + "/health", headers=server.headers).json()["policy_version"])


def recomputed(model, prompt: list[int], ids: list[int], temperature: float) -> torch.Tensor:
    """log p(id) at `temperature` from one plain forward over prompt + response."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    scaled = logits / (temperature if temperature > 0 else 1.0)
    return torch.log_softmax(scaled, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


def load_start_weights(server: ServeProcess, tiny, tmp_path: Path) -> int:
    """Put `server` back to the start policy (tiny-random seed 0). Versions only go up, so it is
    loaded as the server's next version, which is returned."""
    path = write_weights_dir(tiny[0].state_dict(), tmp_path / "start")
    version = version_of(server) + 1
    body = {"model_path": str(path), "policy_version": version}
    r = httpx.post(server.url + "/update_weights_from_disk", json=body, headers=server.headers)
    assert r.status_code == 200 and r.json()["policy_version"] == version, r.text
    return version
