"""One process run to its end: in a session of its own, its output captured up to a cap, killed
with everything it started (its process group) when it ends, floods its output, passes its
deadline, or is stopped from another thread.

    run = Run(["node", "agent.mjs"], env, stdin_path)      # started now
    done = run.finish(deadline)                            # a time.monotonic() deadline
    done.returncode, done.stdout, done.over, done.timed_out

A child that left the group (`setsid`) escapes the kill; one that stays in it, as any child does,
never outlives the episode.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO

OUTPUT_CAP = 1 << 20
"""Bytes of stdout, and of stderr, kept per process; one more and the process is killed."""
CHUNK = 1 << 16
DRAIN_S = 5.0
"""Seconds to wait, after the kill, for the pipes to close (a child that escaped may hold them)."""


@dataclass
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes
    over: str = ""
    """The stream that passed OUTPUT_CAP ('stdout' or 'stderr'; '' = neither)."""
    timed_out: bool = False
    stopped: bool = False
    """Stopped from outside (`Run.kill`), as at the episode's timeout."""


class Run:
    """See the module docstring."""

    def __init__(self, argv: list[str], env: dict[str, str], stdin_path: str, cap: int = OUTPUT_CAP) -> None:
        self.cap, self.over, self.stopped, self.reaped = cap, "", False, False
        self.lock = threading.Lock()  # a kill never lands after the reap: the pid may be another's by then
        with open(
            stdin_path, "rb"
        ) as stdin:  # a file, not a pipe: a process that never reads it cannot block us
            self.proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: one kill reaches its children
                bufsize=0,
            )
        self.out, self.err = bytearray(), bytearray()
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out, "stdout"), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err, "stderr"), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream: IO[bytes], sink: bytearray, name: str) -> None:
        """Keep up to `cap` bytes; past it, kill the group rather than buffer a flood."""
        try:
            while chunk := stream.read(CHUNK):
                if len(sink) + len(chunk) > self.cap:
                    self.over = self.over or name
                    self.kill_group()
                    return
                sink += chunk
        except (OSError, ValueError):  # the stream was closed under us
            return
        finally:
            with contextlib.suppress(OSError):
                stream.close()

    def kill_group(self) -> None:
        """SIGKILL the process and every process still in its group (ignored once all are gone)."""
        with self.lock:
            self._signal_group()

    def _signal_group(self) -> None:
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        """Stop it from another thread (the episode's timeout)."""
        self.stopped = True
        self.kill_group()

    def finish(self, deadline: float) -> Finished:
        """Wait for it until `deadline`, then kill what is left of its group and read its output."""
        timed_out = not self._exited(deadline)
        # its children too: one that outlives it (a daemon, a hung tool) ends with the episode. Its
        # pid is not reaped yet, so the group's id still names this group and no other
        with self.lock:
            self._signal_group()
            self.proc.wait()
            self.reaped = True
        for reader in self.readers:
            reader.join(DRAIN_S)
        return Finished(
            self.proc.returncode, bytes(self.out), bytes(self.err), self.over, timed_out, self.stopped
        )

    def _exited(self, deadline: float) -> bool:
        """Whether it exited by `deadline`, left unreaped (WNOWAIT) so its pid keeps naming its group."""
        pause = 0.002
        while os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)
        return True
