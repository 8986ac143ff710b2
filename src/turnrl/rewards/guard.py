"""Reward functions that misbehave: one that raises, hangs, or returns NaN or a non-number.

Where they run: `RuleReward` (stage 6) calls them in the trainer's process, on the main thread,
or on the rollout producer's thread in async mode. A hang there would stop training, and neither
a thread nor `signal.alarm` (main thread only) can stop a function that never returns. So with
`reward.timeout_s > 0` each call goes to a child process (`RewardProcess`) that is killed and
replaced when a call overruns; with 0 the calls run in the trainer's process, as verl runs them.

Either way a call ends in an `Outcome`: a score and its extra metrics, or a one-line account of
what went wrong, which `RuleReward` turns into a failure or a zero score (`reward.on_error`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from turnrl.rewards.registry import (
    BadScore,
    RewardError,
    ScoreFn,
    check_score,
    resolve,
    shorten,
)

ERRORS_KEY = "reward/errors"
"""Metric: rows whose reward function failed and were scored 0 (reward.on_error zero or later steps)."""
STARTUP_TIMEOUT_S = 120.0  # spawning the child imports the reward modules (and a custom file's imports)


@dataclass(frozen=True)
class Outcome:
    """One reward call: `score` and `extra` metrics, or `error` (what went wrong, one line)."""

    score: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    error: str = ""
    timed_out: bool = False


def describe(err: BaseException) -> str:
    """`ZeroDivisionError: division by zero (my_reward.py:7)`: the type, the message's first line,
    and the line that raised."""
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {shorten(lines[0])}" if lines else type(err).__name__
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        text += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return text


def call_reward(fn: ScoreFn, source: str, text: str, truth: Any, extra_info: Any) -> Outcome:
    """Call one reward function; whatever it raises or returns ends in an Outcome."""
    try:
        result = fn(source, text, truth, extra_info)
    except (
        Exception,
        SystemExit,
    ) as err:  # sys.exit() in a reward function is its bug; Ctrl-C still stops the run
        return Outcome(error=f"raised {describe(err)}")
    try:
        score, extra = check_score(result)
    except BadScore as err:
        return Outcome(error=str(err))
    return Outcome(score, extra)


class InProcess:
    """`reward.timeout_s=0`: call the functions here, with no time limit."""

    def __init__(self, custom: ScoreFn | None, table: dict[str, ScoreFn]):
        self.custom, self.table = custom, table

    def __call__(self, source: str, text: str, truth: Any, extra_info: Any) -> Outcome:
        return call_reward(resolve(source, self.custom, self.table), source, text, truth, extra_info)

    def close(self) -> None:
        pass


class RewardProcess:
    """Reward calls in a child process, each with a time limit of `timeout_s`.

    A call that overruns has its child killed (a hung function cannot be stopped any other way)
    and the next call starts a fresh one. One call at a time: the async producer thread and a
    validation on the main thread share it under a lock.

    `table` (data_source -> scorer) is sent to the child when it starts: pickled by reference, each
    scorer is imported there by name, so the child routes the same sources to the same functions
    (the built-in tasks' scorers included, which this layer does not import).
    """

    def __init__(self, custom_path: str, custom_name: str, table: dict[str, ScoreFn], timeout_s: float):
        self.spec = {"custom_path": custom_path, "custom_name": custom_name}
        self.table = dict(table)
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.ready = False
        self.restarts = 0
        self._spawn()  # now: its imports overlap the rest of the trainer's start-up

    def _spawn(self) -> None:
        # a fresh interpreter, not multiprocessing: fork can deadlock a child of a process that holds
        # torch's and tokenizers' threads, and spawn re-runs the user's main script in the child
        parent, child = multiprocessing.Pipe()
        command = [sys.executable, "-m", "turnrl.rewards.child", str(child.fileno()), str(os.getpid())]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the same modules
        self.proc = subprocess.Popen(
            [*command, json.dumps(self.spec)], pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL
        )
        child.close()
        self.conn, self.ready = parent, False
        try:
            parent.send(self.table)  # the child's first read: a few hundred bytes, never blocks
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            self._kill()
            raise RewardError(
                f"a reward function cannot be sent to the reward process ({describe(err)}): it must be "
                "importable by name, or set reward.timeout_s=0 to call it in the trainer's process"
            ) from None

    def _wait_ready(self) -> None:
        assert self.conn is not None
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self._kill()
            raise RewardError(f"the reward process did not start within {STARTUP_TIMEOUT_S:g}s")
        try:
            kind, message = self.conn.recv()
        except EOFError:
            code = self._kill()
            raise RewardError(f"the reward process exited while starting (exit code {code})") from None
        if kind != "ready":
            self._kill()
            raise RewardError(message)
        self.ready = True

    def __call__(self, source: str, text: str, truth: Any, extra_info: Any) -> Outcome:
        with self.lock:
            if self.conn is None:
                self._spawn()
                self.restarts += 1
            if not self.ready:
                self._wait_ready()
            return self._call(source, text, truth, extra_info)

    def _call(self, source: str, text: str, truth: Any, extra_info: Any) -> Outcome:
        assert self.conn is not None
        try:
            self.conn.send((source, text, truth, extra_info))
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            return Outcome(error=f"could not be called: the row cannot be sent to the reward process ({err})")
        except OSError:  # the child died between calls
            code = self._kill()
            return Outcome(error=f"could not be called: the reward process had exited (exit code {code})")
        if not self.conn.poll(self.timeout_s):
            self._kill()
            return Outcome(
                error=f"did not return within reward.timeout_s={self.timeout_s:g}s", timed_out=True
            )
        try:
            outcome: Outcome = self.conn.recv()
        except EOFError:  # os._exit, a segfault, the OOM killer
            code = self._kill()
            return Outcome(error=f"ended the reward process (exit code {code}) instead of returning")
        return outcome

    def _kill(self) -> int | None:
        proc, conn = self.proc, self.conn
        self.proc = self.conn = None
        self.ready = False
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        return proc.wait(timeout=10)

    def close(self) -> None:
        with self.lock:
            if self.conn is not None and self.proc is not None and self.proc.poll() is None:
                try:
                    self.conn.send(None)  # ask it to leave: a code sandbox it started then stops too
                    self.proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill()
