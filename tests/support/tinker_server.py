"""`turnrl tinker serve`'s app on a loopback socket in the test process, served as `listen.serve_on`
serves it (the connection bounds of the command), on a thread: for the tests that talk to it with
the real `tinker` SDK."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tests.support.app_thread import serving_app
from turnrl.models.loader import load_model, model_directory


@contextmanager
def serving_tinker(base: str, root: Path, key: str, poll_wait_s: float) -> Iterator[str]:
    """The service over `base` (seed 0) with its state under `root`, keyed by `key`; yields its URL.
    `poll_wait_s`: how long a poll waits for a running future (short: "try again" is exercised)."""
    from turnrl.servers.connections import ConnectionLimits, Connections
    from turnrl.tinker.app import create_app
    from turnrl.tinker.backbone import Backbone
    from turnrl.tinker.checkpoints import StateRoot
    from turnrl.tinker.cli import HEADER_TIMEOUT_S
    from turnrl.tinker.service import ServiceLimits, TinkerService

    model, tokenizer = load_model(base, torch.device("cpu"), seed=0)
    backbone = Backbone(model, tokenizer, base, str(model_directory(base)))
    service = TinkerService(backbone, StateRoot(root), ServiceLimits(poll_wait_s=poll_wait_s))
    app = create_app(service, key)
    with serving_app(app, Connections(ConnectionLimits(header_timeout_s=HEADER_TIMEOUT_S))) as url:
        yield url


@dataclass
class Served:
    """A running service: its URL and the state root its checkpoints go under."""

    url: str
    root: Path


@contextmanager
def served_under(base: str, root: Path, key: str, poll_wait_s: float) -> Iterator[Served]:
    """`serving_tinker`, yielding the URL together with `root` (the tests read checkpoints there)."""
    with serving_tinker(base, root, key, poll_wait_s) as url:
        yield Served(url, root)


def plain_logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """log p(tokens[i] | prompt + tokens[:i]) from one forward pass over the whole sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    scored = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return scored.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1).numpy()
