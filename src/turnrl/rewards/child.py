"""The reward process (`turnrl.rewards.guard.RewardProcess`): `python -m turnrl.rewards.child FD PID SPEC`.

It reads its table of reward functions (data_source -> scorer, sent pickled by the trainer) and
loads the custom function once, then answers each `(data_source, solution_str, ground_truth,
extra_info)` it reads from the connection on file descriptor FD with an `Outcome`, until it reads
None, the connection closes, or the trainer (process PID) goes away. Reward functions run on this
process's main thread, so math-verify's SIGALRM timeouts work here even in async mode.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.rewards.guard import Outcome, call_reward
from turnrl.rewards.registry import RewardError, load_custom, resolve


def serve(conn: Connection, spec: dict[str, Any]) -> None:
    try:
        table = conn.recv()
        custom = load_custom(spec["custom_path"], spec["custom_name"]) if spec["custom_path"] else None
    except TurnrlInputError as err:
        conn.send(("error", str(err)))
        return
    except (ImportError, AttributeError, EOFError) as err:  # a scorer that does not import here
        conn.send(("error", f"the reward process could not load its reward functions: {err!r}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            message = conn.recv()
        except (EOFError, ConnectionResetError):  # the trainer is gone: nothing left to score for
            return
        if message is None:
            return
        source, text, truth, extra_info = message
        try:
            fn = resolve(source, custom, table)
        except RewardError as err:
            conn.send(Outcome(error=str(err)))
            continue
        conn.send(call_reward(fn, source, text, truth, extra_info))


def exit_with_parent(parent_pid: int) -> None:
    # a thread, not PR_SET_PDEATHSIG: that fires when the *thread* that started us ends, and the
    # async producer thread may be the one that restarts this process
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def main(argv: list[str]) -> None:
    fd, parent_pid, spec = int(argv[0]), int(argv[1]), json.loads(argv[2])
    threading.Thread(target=exit_with_parent, args=(parent_pid,), daemon=True).start()
    serve(Connection(fd), spec)


if __name__ == "__main__":
    main(sys.argv[1:])
