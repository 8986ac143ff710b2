"""Built-in Harbor tasks copied into a folder of one's own (`data.task=harbor:<folder>`), and a stage
hook that counts the workspace sandbox's live sessions once the rollout stage is over."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.keep_stages import KeepStages
from turnrl.servers.sandbox import check_server

BUILTIN = Path(__file__).parents[2] / "src" / "turnrl" / "tasks" / "harbor" / "builtin"


def task_folder(out: Path, keys: tuple[str, ...]) -> Path:
    """`out` holding a copy of each built-in task `family/name` as `out/name`."""
    for key in keys:
        shutil.copytree(BUILTIN / key, out / key.split("/")[1])
    return out


class SessionsAfterGen(KeepStages):
    """Also asks the workspace sandbox (`endpoint()`, set once the run is built) how many sessions
    live after each rollout stage."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoint: Callable[[], Any] | None = None
        self.live_after_gen: list[int] = []

    def record(self, stage: str, batch: Any, elapsed_s: float) -> None:
        super().record(stage, batch, elapsed_s)
        if stage == "gen" and self.endpoint is not None:
            endpoint = self.endpoint()
            health = check_server(endpoint.url, api_key=endpoint.api_key or None)
            self.live_after_gen.append(health["sessions"]["live"])
