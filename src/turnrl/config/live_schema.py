"""The `live` section: serve the policy to real clients and learn from their rewarded sessions
(`turnrl live serve`, docs/live.md)."""

from __future__ import annotations

from dataclasses import dataclass

from turnrl.config.rules import ranged

GROUP_BY = ("prompt", "task")


@dataclass
class LiveConfig:
    keys_file: str = ""
    """JSON file of the clients allowed in: `{"clients": [{"name": "alice", "key": "...", "admin":
    false}]}`. Every request carries its client's key; an admin key may also switch learning off and
    on. Required by `turnrl live serve`."""
    host: str = "127.0.0.1"
    """Where the server listens."""
    port: int = ranged(0, "in [0, 65535]", "0 = any free port (printed at start)")
    """The server's port."""
    learn: bool = True
    """Train on rewarded sessions from the start (the admin route switches it at run time; serving
    goes on either way)."""
    group_by: str = "prompt"
    """How sessions form the groups whose mean reward is each other's baseline: `prompt`, sessions
    whose first prompt is the same token for token; `task`, sessions of the same task (the
    `X-Turnrl-Task` header of a session's first call, else its client's name), for clients that do
    not repeat prompts."""
    group_size: int = ranged(4, ">= 2")
    """Rewarded sessions per group. A step trains `data.train_batch_size` groups."""
    group_wait_s: float = ranged(600.0, "> 0")
    """A group still short of `group_size` after its oldest rewarded session waited this long is
    trained as it is if it has at least 2 sessions; a lone session is dropped (`live/dropped/no_group`)."""
    session_idle_s: float = ranged(300.0, "> 0")
    """A session with no call for this long is closed (`live/closed/idle`)."""
    reward_window_s: float = ranged(3600.0, "> 0")
    """How long after a session ends a reward for it is taken; a session still without one is then
    dropped (`live/dropped/no_reward`)."""
    max_open_sessions: int = ranged(256, ">= 1")
    """Sessions open at once; a new one beyond is refused (429) until one closes."""
    max_store_mb: int = ranged(1024, ">= 1")
    """Size of the session record on disk (`<run>/live/`); new sessions are refused (507) while it is
    full. Trained and dropped sessions leave it at the next checkpoint."""
    max_session_id: int = ranged(128, ">= 1")
    """Longest session id a client may name (characters)."""
    score_fn: str = ""
    """`module:function` that scores a closed session itself, instead of waiting for a client's reward:
    called as `fn(messages, task)` with the session's recorded messages (its last answer included)
    and its task; a number is the session's reward, None leaves it to the clients."""
