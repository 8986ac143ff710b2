"""The live session store and its grouping, worked by hand: which sessions make a group, what a
restart after a crash or a rollback makes of the marks on disk, what is refused and why."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from turnrl.live.groups import Waiting, plan_groups
from turnrl.live.store import EVENTS, Limits, Refused, SessionStore, finite_reward


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sample(prompt: list[int]) -> dict:
    return {"prompt": prompt, "ids": [7, 8], "mask": [1, 1], "log_probs": [-0.1, -0.2], "versions": [0, 0],
            "turns": 1, "truncated": False}  # fmt: skip


def store_at(tmp_path: Path, clock: Clock, **limits: object) -> SessionStore:
    return SessionStore(tmp_path / "live", Limits(**{"group_size": 2, **limits}), clock)  # type: ignore[arg-type]


def ended(
    store: SessionStore, sid: str, client: str = "alice", prompt: str = "P", reward: float | None = 1.0
):
    s = store.session_for_call(sid, client, "calc", lambda: object())
    store.call_done(s)
    store.close(s, {"samples": [sample([1, 2])], "prompt_key": prompt, "calls": 1}, "client")
    if reward is not None:
        store.reward(s, reward)
    return s


def test_groups_by_key_in_reward_order_with_a_short_group_after_the_wait():
    waiting = [Waiting(f"s{i}", "P", float(i)) for i in range(1, 6)] + [Waiting("q1", "Q", 0.5)]
    plan = plan_groups(waiting, size=2, wait_s=10, now=6)
    assert plan.groups == [["s1", "s2"], ["s3", "s4"]] and plan.alone == []  # s5 and q1 wait
    plan = plan_groups(waiting, size=2, wait_s=10, now=16)
    assert plan.groups == [["s1", "s2"], ["s3", "s4"]] and sorted(plan.alone) == ["q1", "s5"]
    three = [Waiting(f"t{i}", "T", float(i)) for i in range(3)]
    assert plan_groups(three, size=4, wait_s=10, now=9).groups == []
    assert plan_groups(three, size=4, wait_s=10, now=10).groups == [
        ["t0", "t1", "t2"]
    ]  # smaller, not dropped
    pair = [Waiting("a", "pref:a", 3.0), Waiting("b", "pref:a", 3.0)]
    assert plan_groups(pair, size=4, wait_s=10, now=3).groups == [["a", "b"]]


def test_a_step_takes_a_group_and_its_marks_outlive_compaction(tmp_path):
    clock = Clock()
    store = store_at(tmp_path, clock)
    a, b = ended(store, "a"), ended(store, "b", reward=0.0)
    ended(store, "c", prompt="Q")  # alone under another prompt: not in the group
    groups = store.take(1)
    assert [[s.id for s in g] for g in groups] == [["a", "b"]] and a.state == b.state == "taken"
    store.trained([a, b], step=1)
    store.compact()
    assert set(store.sessions) == {"c"} and store.retired["a"] == ("alice", "trained")
    with pytest.raises(Refused) as reused:
        store.session_for_call("a", "alice", "calc", lambda: object())
    assert reused.value.status == 409
    again = store_at(tmp_path, clock)  # a restart: c waits, a and b stay used
    again.replay(resumed_step=1)
    assert set(again.sessions) == {"c"} and again.sessions["c"].outcome() == 1.0
    assert again.retired["a"] == ("", "trained")
    with pytest.raises(Refused, match="already used and trained"):
        again.session_for_call("b", "bob", "calc", lambda: object())


def test_a_mark_without_its_checkpoint_trains_again_and_a_rollback_never(tmp_path):
    clock = Clock()
    store = store_at(tmp_path, clock)
    a, b = ended(store, "a"), ended(store, "b", reward=0.0)
    store.take(1)
    store.trained([a, b], step=2)  # the process died before step 2's checkpoint was whole
    crashed = store_at(tmp_path, clock)
    crashed.replay(resumed_step=1)
    assert crashed.counts["requeued_after_crash"] == 2
    assert [[s.id for s in g] for g in crashed.take(1)] == [["a", "b"]]
    saved = store_at(tmp_path, clock)  # the checkpoint made it
    saved.replay(resumed_step=2)
    assert saved.sessions["a"].state == "trained" and saved.ready() == []
    with open(tmp_path / "live" / EVENTS, "a") as f:  # `turnrl live rollback RUN 1`
        f.write('{"kind": "rollback", "step": 1, "at": 0}\n')
    rolled = store_at(tmp_path, clock)
    rolled.replay(resumed_step=1)
    assert rolled.counts["dropped/rolled_back"] == 2 and rolled.ready() == []
    assert rolled.sessions["a"].dropped == "rolled_back"


def test_a_torn_last_line_is_skipped_and_counted(tmp_path):
    clock = Clock()
    store = store_at(tmp_path, clock)
    ended(store, "a")
    with open(tmp_path / "live" / EVENTS, "a") as f:
        f.write('{"kind": "reward", "id": "a", "val')  # a crash mid-write
    again = store_at(tmp_path, clock)
    again.replay(resumed_step=0)
    assert again.counts["torn_lines"] == 1 and again.sessions["a"].outcome() == 1.0
    b = ended(again, "b", reward=0.0)  # appended after the cut: not glued to the torn line
    third = store_at(tmp_path, clock)
    third.replay(resumed_step=0)
    assert third.counts["torn_lines"] == 0 and third.sessions[b.id].outcome() == 0.0


def test_idle_sessions_close_and_unrewarded_ones_expire(tmp_path):
    clock = Clock()
    store = store_at(tmp_path, clock, idle_s=300.0, reward_window_s=3600.0)
    s = store.session_for_call("open", "alice", "calc", lambda: object())
    store.call_done(s)
    clock.now += 299
    assert store.expired() == []
    clock.now += 2
    assert store.expired() == [s]
    late = ended(store, "late", reward=None)
    clock.now += 3601
    store.expired()
    assert late.state == "dropped" and store.counts["dropped/no_reward"] == 1
    with pytest.raises(Refused) as refused:
        store.reward(late, 1.0)
    assert refused.value.status == 410


def test_what_is_refused(tmp_path):
    clock = Clock()
    store = store_at(tmp_path, clock, max_open=1, max_id=8)
    with pytest.raises(Refused) as long_id:
        store.session_for_call("x" * 9, "alice", "calc", lambda: object())
    assert long_id.value.status == 400
    s = store.session_for_call("one", "alice", "calc", lambda: object())
    with pytest.raises(Refused) as full:
        store.session_for_call("two", "alice", "calc", lambda: object())
    assert full.value.status == 429
    with pytest.raises(Refused) as taken:
        store.session_for_call("one", "bob", "calc", lambda: object())
    assert taken.value.status == 409
    with pytest.raises(Refused) as still_open:
        store.reward(s, 1.0)
    assert still_open.value.status == 409
    store.call_done(s)
    store.close(s, {"samples": [sample([1])], "prompt_key": "P", "calls": 1}, "client")
    with pytest.raises(Refused, match="has no call 1"):
        store.reward(s, 1.0, call=1)
    store.reward(s, 0.25, call=0)
    assert s.outcome() == 0.25  # call rewards sum while the session has none of its own
    with pytest.raises(Refused, match="same session"):
        store.prefer(s, s)
    with pytest.raises(Refused) as elsewhere:
        store.owned("one", "bob")
    assert elsewhere.value.status == 404
    for bad in (math.nan, math.inf, True, "1", None):
        with pytest.raises(Refused) as not_a_number:
            finite_reward(bad, "reward")
        assert not_a_number.value.status == 422
    full_disk = store_at(tmp_path / "b", clock, max_bytes=1)
    ended(full_disk, "a", reward=None)
    with pytest.raises(Refused) as no_room:
        full_disk.session_for_call("b", "alice", "calc", lambda: object())
    assert no_room.value.status == 507


def test_a_session_without_a_recorded_call_is_dropped_not_written(tmp_path):
    store = store_at(tmp_path, Clock())
    s = store.session_for_call("empty", "alice", "calc", lambda: object())
    store.call_done(s)
    store.close(s, {"samples": [], "prompt_key": "", "calls": 0}, "client")
    assert s.dropped == "no_calls" and not (tmp_path / "live" / "sessions.jsonl").exists()


def test_grouped_by_task_sessions_of_different_prompts_meet(tmp_path):
    store = store_at(tmp_path, Clock(), group_by="task")
    ended(store, "a", prompt="P")
    ended(store, "b", prompt="Q", reward=0.0)
    ended(store, "c", client="bob", prompt="P")  # bob's task is "calc" too: the same group key
    assert store.ready() == [["a", "b"]]
    by_prompt = store_at(tmp_path / "p", Clock())
    ended(by_prompt, "a", prompt="P")
    ended(by_prompt, "b", prompt="Q")
    assert by_prompt.ready() == []
