"""Process-level helpers every layer may use: they import nothing of turnrl's.

Kept free of heavy imports at module level (no torch): the sandbox server and the HTTP clients
import this module, and their start-up must not pay for torch.
"""

from __future__ import annotations

import os
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now. Another process can take it before the caller
    binds it, so whoever starts a server on it retries on "address already in use"."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch; with `deterministic`, also make GPU kernels deterministic
    (`trainer.deterministic`): CPU kernels already are, for a fixed thread count. Every process
    that builds a role calls it (the driver, each Ray rank), hence its place at the bottom."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic; read when CUDA initialises
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
