"""Rewarded sessions into training groups: the sessions whose rewards are each other's baseline.

Pure functions of what the store holds; the store applies what they decide. A group is
- a **preference**: the two sessions a client compared (reward 1 and 0), ready once both ended;
- else the sessions of one **key** (the first prompt, or the task: `live.group_by`), in the order
  their rewards came: every `size` of them make a group; the last ones, short of `size`, wait until
  the oldest of them has waited `wait_s`, then go as a smaller group (2 or more) or are dropped (one
  alone has no baseline).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """A rewarded, ended session not yet trained."""

    id: str
    key: str
    """Its group key: the prompt's hash or the task (`live.group_by`), or `pref:<chosen>` for a
    preference pair."""
    rewarded_at: float


@dataclass(frozen=True)
class Plan:
    groups: list[list[str]]
    """Ready groups, oldest first, each its session ids."""
    alone: list[str]
    """Sessions that waited `wait_s` with no company: dropped (`live/dropped/no_group`)."""


def plan_groups(waiting: list[Waiting], size: int, wait_s: float, now: float) -> Plan:
    by_key: dict[str, list[Waiting]] = defaultdict(list)
    for w in sorted(waiting, key=lambda w: (w.rewarded_at, w.id)):
        by_key[w.key].append(w)
    ready: list[tuple[float, list[str]]] = []
    alone: list[str] = []
    for key, members in by_key.items():
        if key.startswith("pref:"):  # a pair, complete by construction
            ready.append((members[-1].rewarded_at, [m.id for m in members]))
            continue
        full = len(members) - len(members) % size
        for start in range(0, full, size):
            chunk = members[start : start + size]
            ready.append((chunk[-1].rewarded_at, [m.id for m in chunk]))
        rest = members[full:]
        if rest and now - rest[0].rewarded_at >= wait_s:
            if len(rest) >= 2:
                ready.append((rest[-1].rewarded_at, [m.id for m in rest]))
            else:
                alone.append(rest[0].id)
    ready.sort(key=lambda item: item[0])
    return Plan([ids for _, ids in ready], alone)
