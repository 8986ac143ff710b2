"""The live sessions: open, ended, rewarded, trained or dropped; recorded on disk as they change.

    store = SessionStore(directory, limits)          # replays <dir>/sessions.jsonl and events.jsonl
    store.open(id, client, task, handle)             # a client's first call names a new session
    store.close(id, client, record, why)             # its samples on disk: it may now be rewarded
    store.reward(id, client, value) / store.prefer(client, chosen, rejected)
    groups = store.take(n)                           # ready groups for one step (blocks the caller)
    store.trained(ids, step)                         # after the step's checkpoint is on disk

**On disk** (`<run>/live/`): `sessions.jsonl`, one line per ended session with its recorded samples
(exact token ids, masks, log-probs, versions); `events.jsonl`, one line per reward, preference, drop,
trained step and rollback. Compaction (at each checkpoint) forgets a trained or dropped session's
record and rewards but keeps its trained or drop mark: its id stays used, across restarts too. Both are appended and flushed to disk before the route answers, so a reward the
client was told was taken survives a crash. A restart replays them: a session trained by a step
the run resumed from stays trained; one marked by a later step (the run crashed after the mark and
before that step's checkpoint was on disk, so the update is lost) waits to be trained again, once;
one trained by a step that `turnrl live rollback` undid is dropped (`rolled_back`), never trained
again; every other rewarded session waits for a group again. Open sessions are not on disk: a
crash loses a session still open (never a rewarded one, since a session reward ends its session).
A torn last line (a crash mid-write) is skipped and counted.

Everything here is called from the server's routes, its idle timer and the trainer: one lock.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnrl.live.groups import Waiting, plan_groups

log = logging.getLogger(__name__)

SESSIONS, EVENTS = "sessions.jsonl", "events.jsonl"


class Refused(Exception):
    """A request the store refuses: HTTP `status` and a one-line message naming the culprit."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    max_open: int = 256
    max_bytes: int = 1 << 30
    max_id: int = 128
    idle_s: float = 300.0
    reward_window_s: float = 3600.0
    group_by: str = "prompt"
    group_size: int = 4
    group_wait_s: float = 600.0


@dataclass
class Session:
    id: str
    client: str
    task: str
    opened: float
    last_call: float
    handle: Any = None
    """The open session's recording (the gateway's episode); None once ended."""
    ended: float | None = None
    why: str = ""
    """Why it ended: `client`, `idle`, `reward`, `shutdown`."""
    record: dict[str, Any] = field(default_factory=dict)
    """What training reads: `samples` (one per fork), `prompt_key`, `calls`, `messages`."""
    reward: float | None = None
    call_rewards: dict[int, float] = field(default_factory=dict)
    rewarded_at: float | None = None
    pair: str = ""
    """`pref:<chosen id>` when a preference rewarded it."""
    state: str = "open"
    """open, ended, taken (in a step being trained), trained, dropped."""
    dropped: str = ""
    """Why it was dropped (`live/dropped/<why>`)."""
    calls_running: int = 0

    def outcome(self) -> float | None:
        """The session's reward: its own, else the sum of its calls' rewards, else None."""
        if self.reward is not None:
            return self.reward
        return sum(self.call_rewards.values()) if self.call_rewards else None


def finite_reward(value: Any, what: str) -> float:
    """`value` as a float, or Refused(422) naming `what`: booleans, strings, NaN and inf are not rewards."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Refused(f"{what}: want a finite number, got {json.dumps(value)[:40]}", 422)
    return float(value)


class SessionStore:
    """See the module docstring. `clock`: wall seconds (`time.time`; sessions outlive a restart)."""

    def __init__(self, directory: Path, limits: Limits, clock: Callable[[], float] = time.time) -> None:
        self.dir, self.limits, self.clock = directory, limits, clock
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sessions: dict[str, Session] = {}
        self.retired: dict[str, tuple[str, str]] = {}
        """Sessions compacted away since this process started: id -> (client, what became of it)."""
        self.counts: Counter[str] = Counter()
        self.lock = threading.Condition()
        self.learning = True
        self.stopping = False

    # -- disk ---------------------------------------------------------------------------------------
    def _append(self, name: str, entry: dict[str, Any]) -> int:
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with open(self.dir / name, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return len(line)

    def _event(self, kind: str, **fields: Any) -> None:
        self._append(EVENTS, {"kind": kind, "at": self.clock(), **fields})

    def disk_bytes(self) -> int:
        return sum((self.dir / n).stat().st_size for n in (SESSIONS, EVENTS) if (self.dir / n).exists())

    def _cut_torn_tail(self, name: str) -> None:
        """Cut a last line a crash left without its newline: the next append would be glued to it
        and lost with it."""
        path = self.dir / name
        data = path.read_bytes() if path.exists() else b""
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
            self.counts["torn_lines"] += 1

    def replay(self, resumed_step: int) -> None:
        """Rebuild the ended sessions and their fate from disk; see the module docstring."""
        with self.lock:
            for name in (SESSIONS, EVENTS):
                self._cut_torn_tail(name)
            for entry in self._lines(SESSIONS):
                s = Session(entry["id"], entry["client"], entry["task"], entry["opened"], entry["ended"])
                s.ended, s.why, s.state = entry["ended"], entry["why"], "ended"
                s.record = {k: entry[k] for k in ("samples", "prompt_key", "calls")}
                self.sessions[s.id] = s
            trained_at: dict[str, int] = {}  # session -> the step that trained it
            for e in self._lines(EVENTS):
                self._replay_event(e, trained_at)
            for sid, step in trained_at.items():
                self._replay_mark(sid, step, resumed_step)
            waiting = sum(s.state == "ended" and s.outcome() is not None for s in self.sessions.values())
            if self.sessions:
                log.warning(
                    "live: replayed %d ended sessions (%d rewarded and waiting to be trained, %d rolled back)",
                    len(self.sessions), waiting, self.counts["dropped/rolled_back"],
                )  # fmt: skip

    def _replay_event(self, e: dict[str, Any], trained_at: dict[str, int]) -> None:
        s = self.sessions.get(e.get("id", ""))
        if e["kind"] == "trained":
            trained_at.update(dict.fromkeys(e["ids"], e["step"]))
        elif e["kind"] == "rollback":  # steps past it were undone by hand: never train them again
            for sid in [sid for sid, step in trained_at.items() if step > e["step"]]:
                del trained_at[sid]
                self.counts["dropped/rolled_back"] += 1
                if (t := self.sessions.get(sid)) is not None:
                    t.state, t.dropped = "dropped", "rolled_back"
                else:
                    self.retired[sid] = ("", "dropped (rolled_back)")
        elif s is None:
            if e["kind"] == "drop":  # compacted away: its id stays used
                self.retired[e["id"]] = ("", f"dropped ({e['why']})")
        elif e["kind"] == "reward":
            self._apply_reward(s, e["value"], e.get("call"), e["at"])
        elif e["kind"] == "preference":
            s.reward, s.pair, s.rewarded_at = e["value"], e["pair"], e["at"]
        elif e["kind"] == "drop":
            s.state, s.dropped = "dropped", e["why"]

    def _replay_mark(self, sid: str, step: int, resumed_step: int) -> None:
        """A session's last trained mark against the checkpoint the run resumed from."""
        s = self.sessions.get(sid)
        if s is None:
            self.retired[sid] = ("", "trained")
        elif s.state == "dropped":
            return
        elif step <= resumed_step:
            s.state = "trained"
        else:  # its step's checkpoint never made it to disk: the update is lost, train it again
            self.counts["requeued_after_crash"] += 1

    def _lines(self, name: str) -> list[dict[str, Any]]:
        path = self.dir / name
        if not path.exists():
            return []
        out = []
        for raw in path.read_bytes().splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:  # a crash mid-write: the line never counted
                self.counts["torn_lines"] += 1
        return out

    def compact(self) -> None:
        """Rewrite both files without trained and dropped sessions (each atomically: a crash
        leaves the old file or the new one)."""
        with self.lock:
            dead = {sid for sid, s in self.sessions.items() if s.state in ("trained", "dropped")}
            if not dead:
                return
            # sessions first: a crash between the two leaves marks of sessions that are gone (harmless),
            # never sessions whose trained marks are gone (they would be trained again)
            for name in (SESSIONS, EVENTS):
                kept = [e for e in self._lines(name) if not _only_dead(e, dead)]
                tmp = self.dir / f".{name}.tmp"
                tmp.write_bytes(b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in kept))
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                tmp.replace(self.dir / name)
            for sid in dead:
                gone = self.sessions.pop(sid)
                self.retired[sid] = (
                    gone.client,
                    gone.state if gone.state == "trained" else f"dropped ({gone.dropped})",
                )

    # -- sessions -----------------------------------------------------------------------------------
    def session_for_call(self, sid: str, client: str, task: str, open_new: Callable[[], Any]) -> Session:
        """The client's open session `sid`, opened (`open_new()` gives its recording) if new."""
        lim = self.limits
        if not sid or len(sid) > lim.max_id or not sid.isprintable():
            raise Refused(f"session id {sid[:40]!r}: want 1 to {lim.max_id} printable characters", 400)
        with self.lock:
            s = self.sessions.get(sid)
            if sid in self.retired:
                owner, fate = self.retired[sid]
                why = f"already used and {fate}" if owner in ("", client) else "in use by another client"
                raise Refused(f"session {sid!r}: {why}; name a new one", 409)
            if s is not None and s.client != client:
                raise Refused(f"session {sid!r}: in use by another client; name a new one", 409)
            if s is not None and s.state != "open":
                raise Refused(f"session {sid!r}: already ended ({s.why}); name a new one", 409)
            if s is None:
                if sum(x.state == "open" for x in self.sessions.values()) >= lim.max_open:
                    self.counts["refused/max_open"] += 1
                    raise Refused(f"live.max_open_sessions={lim.max_open} sessions are open; close one", 429)
                if self.disk_bytes() >= lim.max_bytes:
                    self.counts["refused/store_full"] += 1
                    raise Refused("the session record is full (live.max_store_mb); try later", 507)
                now = self.clock()
                s = Session(sid, client, task, now, now, handle=open_new())
                self.sessions[sid] = s
                self.counts["opened"] += 1
            s.last_call = self.clock()
            s.calls_running += 1
            return s

    def call_done(self, s: Session) -> None:
        with self.lock:
            s.calls_running -= 1
            s.last_call = self.clock()

    def owned(self, sid: str, client: str) -> Session:
        """The client's session `sid` (404 otherwise: another client's id tells nothing)."""
        s = self.sessions.get(sid)
        if s is None and self.retired.get(sid, ("",))[0] == client:
            raise Refused(f"session {sid!r}: {self.retired[sid][1]}; rewards no longer count", 409)
        if s is None or s.client != client:
            raise Refused(f"session {sid[:64]!r}: unknown to this key", 404)
        return s

    def close(self, s: Session, record: dict[str, Any], why: str) -> None:
        """End an open session with what its recording gives (`record`); on disk before this returns."""
        with self.lock:
            if s.state != "open":
                return
            s.handle, s.ended, s.why, s.record = None, self.clock(), why, record
            s.state = "ended"
            self.counts[f"closed/{why}"] += 1
            if not record.get("samples"):
                self._drop(s, "no_calls")
                return
            entry = {"id": s.id, "client": s.client, "task": s.task, "opened": s.opened, "ended": s.ended}
            entry |= {"why": why} | {k: record[k] for k in ("samples", "prompt_key", "calls")}
            self._append(SESSIONS, entry)
            self.lock.notify_all()

    def _drop(self, s: Session, why: str) -> None:
        s.state, s.dropped = "dropped", why
        self.counts[f"dropped/{why}"] += 1
        if s.ended is not None and why != "no_calls":
            self._event("drop", id=s.id, why=why)

    # -- rewards ------------------------------------------------------------------------------------
    def _apply_reward(self, s: Session, value: float, call: int | None, at: float) -> None:
        if call is None:
            s.reward = value
        else:
            s.call_rewards[call] = value
        s.rewarded_at = at

    def _rewardable(self, s: Session) -> None:
        if s.state in ("taken", "trained"):
            raise Refused(f"session {s.id!r}: already trained", 409)
        if s.state == "dropped":
            raise Refused(f"session {s.id!r}: dropped ({s.dropped}); rewards no longer count", 410)
        if s.ended is not None and self.clock() - s.ended > self.limits.reward_window_s:
            raise Refused(f"session {s.id!r}: ended more than live.reward_window_s ago", 410)
        if s.reward is not None:
            raise Refused(f"session {s.id!r}: already has a reward", 409)

    def reward(self, s: Session, value: float, call: int | None = None) -> None:
        """A reward for the session (which it ends) or for its call number `call` (0-based)."""
        with self.lock:
            self._rewardable(s)
            if call is not None:
                calls = s.record.get("calls", 0) if s.state != "open" else _calls_of(s)
                if call < 0 or call >= calls:
                    raise Refused(f"session {s.id!r}: has no call {call} (it made {calls})", 422)
                if call in s.call_rewards:
                    raise Refused(f"session {s.id!r}: call {call} already has a reward", 409)
            if s.state == "open" and call is None:
                raise Refused(f"session {s.id!r}: still open; close it first", 409)
            self._apply_reward(s, value, call, self.clock())
            self._event("reward", id=s.id, value=value, call=call)
            self.counts["rewards"] += 1
            self.lock.notify_all()

    def prefer(self, chosen: Session, rejected: Session) -> None:
        """`chosen` over `rejected`: rewards 1 and 0, a group of their own."""
        if chosen.id == rejected.id:
            raise Refused("preference: chosen and rejected are the same session", 422)
        with self.lock:
            for s in (chosen, rejected):
                if s.state == "open":
                    raise Refused(f"session {s.id!r}: still open; close it first", 409)
                self._rewardable(s)
                if s.call_rewards:
                    raise Refused(f"session {s.id!r}: already has call rewards", 409)
            now = self.clock()
            for s, value in ((chosen, 1.0), (rejected, 0.0)):
                s.reward, s.pair, s.rewarded_at = value, f"pref:{chosen.id}", now
                self._event("preference", id=s.id, value=value, pair=s.pair)
            self.counts["preferences"] += 1
            self.lock.notify_all()

    # -- time ---------------------------------------------------------------------------------------
    def expired(self) -> list[Session]:
        """Open sessions idle past `live.session_idle_s` (the caller closes them); drops the ended
        ones whose reward window passed without a reward."""
        now, lim = self.clock(), self.limits
        with self.lock:
            idle = [
                s for s in self.sessions.values()
                if s.state == "open" and not s.calls_running and now - s.last_call > lim.idle_s
            ]  # fmt: skip
            for s in list(self.sessions.values()):
                late = s.ended is not None and now - s.ended > lim.reward_window_s
                if s.state == "ended" and s.outcome() is None and late:
                    self._drop(s, "no_reward")
            return idle

    # -- training -----------------------------------------------------------------------------------
    def _waiting(self) -> list[Waiting]:
        """Rewarded, ended sessions not yet trained; a preference pair only while both are."""
        candidates = [
            s for s in self.sessions.values()
            if s.state == "ended" and s.outcome() is not None and s.rewarded_at is not None
        ]  # fmt: skip
        pairs = Counter(s.pair for s in candidates if s.pair)
        return [
            Waiting(s.id, s.pair or self._key(s), s.rewarded_at)  # type: ignore[arg-type]
            for s in candidates
            if not s.pair or pairs[s.pair] == 2
        ]

    def _key(self, s: Session) -> str:
        return s.record["prompt_key"] if self.limits.group_by == "prompt" else f"task:{s.task}"

    def ready(self) -> list[list[str]]:
        """The groups ready now (and lone sessions past `group_wait_s` dropped)."""
        with self.lock:
            lim = self.limits
            plan = plan_groups(self._waiting(), lim.group_size, lim.group_wait_s, self.clock())
            for sid in plan.alone:
                self._drop(self.sessions[sid], "no_group")
            return plan.groups

    def take(self, n: int, poll_s: float = 0.5) -> list[list[Session]]:
        """`n` ready groups, oldest first, once there are that many and learning is on (blocks;
        [] once `stop()` is called). Their sessions are `taken` until `trained` or `release`."""
        while True:
            with self.lock:
                if self.stopping:
                    return []
                groups = self.ready() if self.learning else []
                if len(groups) >= n:
                    chosen = [[self.sessions[sid] for sid in g] for g in groups[:n]]
                    for group in chosen:
                        for s in group:
                            s.state = "taken"
                    return chosen
                self.lock.wait(poll_s)

    def drop_taken(self, sessions: list[Session], why: str) -> None:
        with self.lock:
            for s in sessions:
                self._drop(s, why)

    def trained(self, sessions: list[Session], step: int) -> None:
        """`sessions` are trained by `step`, whose checkpoint is written next (see `replay` for a
        crash in between)."""
        with self.lock:
            self._event("trained", ids=[s.id for s in sessions], step=step)
            for s in sessions:
                s.state = "trained"
            self.counts["trained"] += len(sessions)

    def set_learning(self, on: bool) -> None:
        with self.lock:
            self.learning = on
            self.lock.notify_all()

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()

    def status(self) -> dict[str, Any]:
        with self.lock:
            states = Counter(s.state for s in self.sessions.values())
            waiting = sum(s.state == "ended" and s.outcome() is not None for s in self.sessions.values())
            return {
                "learning": self.learning,
                "sessions": {k: states.get(k, 0) for k in ("open", "ended", "taken", "trained", "dropped")},
                "rewarded_waiting": waiting,
                "counts": dict(sorted(self.counts.items())),
                "store_bytes": self.disk_bytes(),
            }


def _calls_of(s: Session) -> int:
    handle = s.handle
    return int(getattr(getattr(handle, "trajectory", None), "calls", 0))


def _only_dead(entry: dict[str, Any], dead: set[str]) -> bool:
    """What compaction may forget: a dead session's record and rewards. Its trained and drop marks
    stay (a few bytes each): they keep its id used and tell what became of it."""
    return entry.get("id") in dead and ("samples" in entry or entry.get("kind") in ("reward", "preference"))
