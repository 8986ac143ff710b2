"""The futures every tinker call returns: an id now, the result when the SDK polls for it.

Each training or sampling request is a job on the service's worker thread; its route answers at
once with `{"request_id": ...}` and the SDK polls `/api/v1/retrieve_future` with that id until the
job's result (or its error) comes back. The store keeps each result until it has been read, and a
little longer (`read_grace_s`: a poll whose answer was lost in transit can be repeated), then drops
it. It is bounded in number (`max_entries`: finished results are dropped oldest first to make room;
when only unfinished jobs are left, a new request is answered 429, which the SDK retries after a
pause) and in age (`ttl_s`: a result nobody fetched is dropped then). An id the store does not hold
is a one-line 404.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from turnrl.servers.refusal import Refusal


@dataclass
class Entry:
    kind: str
    """What the job was ('forward_backward', 'sample', ...): how its result is encoded."""
    future: Future
    created: float = field(default_factory=time.monotonic)
    finished: float | None = None
    read: float | None = None


class FutureStore:
    """Request id -> the job's future; see the module docstring."""

    def __init__(self, max_entries: int = 4096, ttl_s: float = 3600.0, read_grace_s: float = 60.0) -> None:
        self.max_entries, self.ttl_s, self.read_grace_s = max_entries, ttl_s, read_grace_s
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def reserve(self) -> None:
        """Room for one more entry, or 429: call before starting the job that `add` will hold."""
        with self._lock:
            self._evict(time.monotonic())
            if len(self._entries) >= self.max_entries:
                raise Refusal(
                    f"request: {self.max_entries} requests are in flight on this server (--max-futures); retry later",
                    429,
                )

    def add(self, kind: str, future: Future) -> str:
        request_id = str(uuid.uuid4())
        entry = Entry(kind, future)
        future.add_done_callback(lambda _f: setattr(entry, "finished", time.monotonic()))
        with self._lock:
            self._entries[request_id] = entry
        return request_id

    def get(self, request_id: str) -> Entry:
        with self._lock:
            entry = self._entries.get(request_id)
        if entry is None:
            raise Refusal(
                f"request_id: unknown future {request_id!r} (results are kept until read, at most "
                f"{self.ttl_s:g} s, and are lost when the server restarts)",
                404,
            )
        return entry

    def mark_read(self, entry: Entry) -> None:
        entry.read = entry.read or time.monotonic()

    def _evict(self, now: float) -> None:
        """Under the lock: drop read results past their grace and unread ones past their age; then,
        if still full, finished results oldest first."""
        for request_id, e in list(self._entries.items()):
            if (e.read is not None and now - e.read > self.read_grace_s) or (
                e.finished is not None and now - e.finished > self.ttl_s
            ):
                del self._entries[request_id]
        excess = len(self._entries) - self.max_entries + 1
        if excess > 0:
            done = sorted(
                ((e.read is None, e.finished, k) for k, e in self._entries.items() if e.finished is not None),
            )  # read ones first, then the oldest finished
            for _unread, _finished, request_id in done[:excess]:
                del self._entries[request_id]
