"""Finding and killing what a run left behind.

A program can leave its process group (setpgid), its session (setsid) or simply outlive its
parent. Which net catches it depends on the layers in force: the PID namespace (the kernel
kills the whole namespace with its first process), the slot's cgroup, the slot's uid, and,
when nothing stronger exists, the run's session id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _proc_pids() -> Iterable[int]:
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                yield int(name)


def pids_with_real_uid(uids: range | set[int]) -> list[int]:
    """Processes whose real uid is in `uids`. Read from status, not the /proc dir owner,
    because a process that clears its dumpable flag shows up as owned by root."""
    out = []
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) in uids:
                            out.append(pid)
                        break
        except (OSError, ValueError, IndexError):
            continue
    return out


def _living_stats() -> Iterable[tuple[int, list[bytes]]]:
    """(pid, stat fields from field 3 on) of every process but zombies: those are dead already,
    and only their parent can remove them."""
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            # the command name (field 2) may hold spaces and parentheses: split after the last ')'
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] != b"Z":
                yield pid, fields
        except (OSError, ValueError, IndexError):
            continue


def pids_in_session(sid: int) -> list[int]:
    """Living processes whose session id (field 6) is `sid`."""
    return [pid for pid, fields in _living_stats() if int(fields[3]) == sid]


def children_of(parent: int) -> list[int]:
    """Living direct children (parent pid: field 4) of `parent`."""
    return [pid for pid, fields in _living_stats() if int(fields[1]) == parent]


def session_and_children(leader: int) -> list[int]:
    """Living processes in `leader`'s session or directly under it, `leader` itself excluded."""
    return [
        pid
        for pid, fields in _living_stats()
        if pid != leader and (int(fields[3]) == leader or int(fields[1]) == leader)
    ]


def kill_until_gone(find: Callable[[], list[int]], deadline_s: float = 2.0) -> int:
    """SIGKILL whatever `find` returns until it returns nothing; a fork bomb may keep spawning
    for a few rounds. Returns the number of distinct pids killed."""
    seen: set[int] = set()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        pids = [p for p in find() if p != os.getpid()]
        if not pids:
            break
        seen.update(pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    return len(seen)
