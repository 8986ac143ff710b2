"""The run's own `turnrl serve` child: started again on its port when it dies, stopped at the end."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from turnrl.rollout.server.wire import ServerError

log = logging.getLogger(__name__)


class ChildKeeper:
    """Keeps the inference server the engine owns (a `ServeProcess`, serving at `url`; None when
    every server is external) serving: a child that exited is started again on its port and handed
    to `reload`, which loads the trainer's current weights into it. `restarts` counts the restarts."""

    def __init__(self, child: Any, url: str, reload: Callable[[str], None]) -> None:
        self.child, self.url, self.reload = child, url, reload
        self.restarts = 0  # the own child started again after it died
        self._lock = threading.Lock()

    def dead(self, url: str) -> bool:
        """Whether `url` is the own child and its process has exited."""
        return self.child is not None and url == self.url and not self.child.alive()

    def revive(self, url: str) -> bool:
        """If `url` is the engine's own child and its process has exited, start it again on its
        port with the trainer's current weights; True once it serves again. One thread restarts,
        the others that met the dead child wait for it."""
        child = self.child
        if child is None or url != self.url:
            return False
        if child.alive():
            with contextlib.suppress(subprocess.TimeoutExpired):  # a killed child may still be exiting
                child.process.wait(timeout=1.0)
            if child.alive():
                return True  # it answered badly, but it lives: the retry goes to it again
        with self._lock:
            if child.alive():  # another thread brought it back meanwhile
                return True
            self._restart(child)
            return True

    def _restart(self, child: Any) -> None:
        log.warning(
            "the run's inference server %s exited (status %s); starting it again on its port",
            self.url,
            child.returncode,
        )
        try:
            child.restart()
        except Exception as err:
            raise ServerError(
                f"the run's inference server {self.url} died and could not start again: "
                f"{' '.join(str(err).split())}"
            ) from None
        self.reload(self.url)
        self.restarts += 1

    def log_tail(self, url: str) -> str:
        """The end of the own child's log, as a clause to add to an error about `url` ('' for others)."""
        if self.child is None or url != self.url:
            return ""
        return f"; its log ends: {' | '.join(self.child.log_tail(3).splitlines())}"

    def stop(self) -> None:
        """Stop the own child, once."""
        if self.child is not None:
            child, self.child = self.child, None
            child.stop()
