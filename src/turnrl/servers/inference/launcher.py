"""Run `turnrl serve` as a child process, for `rollout.engine=server` with no server URLs.

    server = ServeProcess("tiny-random", log_path="runs/x/rollout_server.log").start()
    engine = ServerEngine([server.url], ...)
    server.stop()

Port, log, /health, restart and stop are `turnrl.servers.child`'s; `start_all` starts several
children at once, so that their model loads overlap. The child requires a key (`api_key`, random
unless given; clients send `headers`) and loads weights only from `weights_root`, if given. A child that exits at start-up raises
ServerError with the last line of its log (a bad model path, say).
"""

from __future__ import annotations

import sys
from pathlib import Path

from turnrl.rollout.server import ServerError
from turnrl.servers.child import ChildServer, start_all

__all__ = ["ServeProcess", "start_all"]


class ServeProcess(ChildServer):
    """A `turnrl serve` child process serving `model_path` on 127.0.0.1."""

    start_error = ServerError
    unavailable_error = ServerError
    log_prefix = "turnrl-serve-"
    timeout_setting = "rollout.server.startup_timeout_s"

    def __init__(
        self,
        model_path: str,
        device: str = "cpu",
        dtype: str = "auto",
        cache_dir: str = "",
        log_path: str | Path | None = None,
        startup_timeout_s: float = 300.0,
        seed: int = 0,
        host: str = "127.0.0.1",
        extra_args: list[str] | None = None,
        weights_root: str | Path | None = None,
        api_key: str | None = None,
    ) -> None:
        """`weights_root`: the directory /update_weights_from_disk may load from (None: updates
        refused); `api_key`: the key the child requires (None = a fresh random one, '' = none)."""
        super().__init__(
            host=host,
            startup_timeout=startup_timeout_s,
            log_path=log_path,
            extra_args=extra_args,
            api_key=api_key,
        )
        self.model_path, self.device, self.dtype, self.cache_dir = model_path, device, dtype, cache_dir
        self.seed = seed
        self.weights_root = str(weights_root) if weights_root else ""

    def describe(self) -> str:
        return f"turnrl serve --model {self.model_path}"

    def command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "turnrl.cli", "serve", "--model", self.model_path,
            "--host", self.host, "--port", str(port), "--device", self.device, "--dtype", self.dtype,
            "--seed", str(self.seed), *(["--cache-dir", self.cache_dir] if self.cache_dir else []),
            *(["--weights-root", self.weights_root] if self.weights_root else []), *self.extra_args,
        ]  # fmt: skip
