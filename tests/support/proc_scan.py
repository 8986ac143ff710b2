"""Finding live processes through /proc, for tests that check a sandboxed run left nothing behind."""

from __future__ import annotations

import os


def cmdlines_with(marker: str) -> list[int]:
    """Pids whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def pids_of_uids(lo: int, hi: int) -> list[int]:
    """Pids whose real uid is in [lo, hi]."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if lo <= uid <= hi:
            found.append(int(pid))
    return found
