"""tinker:// paths resolve inside the state root and nowhere else (`turnrl.tinker.checkpoints`), and
the futures store keeps results until read, bounded in number and age (`turnrl.tinker.futures`)."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from turnrl.servers.refusal import Refusal
from turnrl.tinker.checkpoints import StateRoot, write_checkpoint
from turnrl.tinker.futures import FutureStore


def test_a_checkpoint_path_resolves_under_the_root(tmp_path):
    root = StateRoot(tmp_path / "state")
    ref = root.parse("tinker://abc:train:0/weights/step-10", "path")
    assert ref.directory == root.root / "abc:train:0" / "weights" / "step-10"
    assert ref.tinker_path == "tinker://abc:train:0/weights/step-10"
    assert root.parse("tinker://r/sampler_weights/s.1", "model_path").kind == "sampler_weights"


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "file:///etc/passwd",
        "tinker://../x/weights/a",
        "tinker://run/weights/../../../etc",
        "tinker://run/weights/a/b",
        "tinker://run/weights/..",
        "tinker://run/weights/.hidden",
        "tinker://run/other/a",
        "tinker://run/weights/",
        "tinker:///weights/a",
    ],
)
def test_any_other_path_is_refused_in_one_line_naming_it(tmp_path, path):
    root = StateRoot(tmp_path)
    with pytest.raises(Refusal) as info:
        root.parse(path, "path")
    assert info.value.status == 400 and str(info.value).startswith(f"path: {path!r} is not a checkpoint path")
    assert "\n" not in str(info.value)


def test_a_symlink_out_of_the_root_is_refused(tmp_path):
    (tmp_path / "outside" / "weights" / "x").mkdir(parents=True)
    root = StateRoot(tmp_path / "state")
    (root.root / "run").symlink_to(tmp_path / "outside")
    with pytest.raises(Refusal, match="resolves outside this server's state root"):
        root.parse("tinker://run/weights/x", "path")


def test_load_only_accepts_the_kinds_asked_for(tmp_path):
    with pytest.raises(Refusal, match=r"expected tinker://<run>/weights/<name>"):
        StateRoot(tmp_path).parse("tinker://r/sampler_weights/a", "path", kinds=("weights",))


def test_a_new_checkpoint_name_is_a_file_name_and_existing_ones_need_overwrite(tmp_path):
    root = StateRoot(tmp_path)
    for name in ("a/b", "..", "", ".x", "x" * 200):
        with pytest.raises(Refusal, match="is not a checkpoint name"):
            root.new("run", "weights", name, "path")
    ref = root.new("run", "weights", "ok", "path")
    write_checkpoint(ref, False, lambda d: (d / "tinker.json").write_text("{}"))
    with pytest.raises(Refusal, match="already exists"):
        write_checkpoint(ref, False, lambda d: None)
    write_checkpoint(ref, True, lambda d: (d / "tinker.json").write_text('{"v": 2}'))
    assert (ref.directory / "tinker.json").read_text() == '{"v": 2}'
    assert [p.name for p in ref.directory.parent.iterdir()] == ["ok"]  # no temporary left behind


def done(value: object) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def test_an_unknown_future_is_a_one_line_404():
    with pytest.raises(Refusal) as info:
        FutureStore().get("nope")
    assert info.value.status == 404 and str(info.value).startswith("request_id: unknown future 'nope'")


def test_results_stay_until_read_then_a_grace_then_go():
    store = FutureStore(max_entries=8, read_grace_s=0.05)
    rid = store.add("optim_step", done({"metrics": {}}))
    store.reserve()
    assert store.get(rid).future.result() == {"metrics": {}}
    store.mark_read(store.get(rid))
    store.get(rid)  # read again within the grace (a lost answer polled again)
    time.sleep(0.1)
    store.reserve()  # eviction runs when room is asked for
    with pytest.raises(Refusal):
        store.get(rid)


def test_unread_results_go_after_their_age():
    store = FutureStore(max_entries=8, ttl_s=0.05)
    rid = store.add("sample", done(b""))
    time.sleep(0.1)
    store.reserve()
    with pytest.raises(Refusal):
        store.get(rid)


def test_a_full_store_drops_finished_results_oldest_first_and_refuses_only_when_all_are_pending():
    store = FutureStore(max_entries=3)
    first, second = store.add("a", done(1)), store.add("b", done(2))
    store.mark_read(store.get(second))  # a read result goes before an unread one
    pending = store.add("c", Future())
    store.reserve()
    with pytest.raises(Refusal):
        store.get(second)
    store.get(first)
    store.add("d", Future())
    store.reserve()  # drops `first`, the last finished one
    with pytest.raises(Refusal):
        store.get(first)
    store.add("e", Future())
    with pytest.raises(Refusal) as info:
        store.reserve()
    assert info.value.status == 429 and "--max-futures" in str(info.value)
    assert store.get(pending).kind == "c"
