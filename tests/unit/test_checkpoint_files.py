"""checkpoint.save: durable (every file and directory fsynced before the renames that publish it),
pruned to `keep`, and `latest` falls back to the newest complete checkpoint when it names none."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.checkpoint_roles import roles
from turnrl.trainer import checkpoint


def test_every_file_and_directory_is_flushed_before_the_rename(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    final = checkpoint.save(tmp_path, 3, roles(), {"global_step": 3})
    tmp = str(tmp_path / "checkpoints" / ".tmp_step_3")
    for rel in ("actor/weights.bin", "actor/shards/0.bin", "actor/shards", "actor", "trainer_state.json", ""):
        assert os.path.normpath(f"{tmp}/{rel}") in synced, rel  # flushed under the temporary name
    assert synced.count(str(tmp_path / "checkpoints")) == 2  # after the rename and after `latest`
    assert (final / "actor" / "shards" / "0.bin").read_bytes() == b"s"


def test_keep_prunes_the_oldest_and_latest_survives(tmp_path):
    for step in (1, 2, 3, 4):
        checkpoint.save(tmp_path, step, roles(), {"global_step": step}, keep=2)
    assert sorted(checkpoint.steps(tmp_path)) == [3, 4]
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step_4"


def test_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    for step in (1, 2):
        checkpoint.save(tmp_path, step, roles(), {"global_step": step})
    (tmp_path / "checkpoints" / "latest").write_text("step_9")  # names a checkpoint that is gone
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step_2"
    (tmp_path / "checkpoints" / "step_2" / checkpoint.TRAINER_STATE).unlink()  # incomplete
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step_1"


def test_a_corrupt_or_truncated_checkpoint_is_skipped_with_its_name(tmp_path, caplog):
    for step in (1, 2, 3):
        checkpoint.save(tmp_path, step, roles(), {"global_step": step})
    root = tmp_path / "checkpoints"
    assert checkpoint.manifest_problem(root / "step_3") is None
    weights = root / "step_3" / "actor" / "weights.bin"
    weights.write_bytes(b"w" * 60)  # truncated: 60 of 100 bytes
    assert checkpoint.latest(tmp_path) == root / "step_2"
    assert "skipping corrupt checkpoint" in caplog.text and "step_3" in caplog.text
    assert "has 60 bytes, the manifest says 100" in caplog.text
    # same size, one byte flipped: only the hash can tell
    shard = root / "step_2" / "actor" / "shards" / "0.bin"
    shard.write_bytes(b"t")
    assert (
        checkpoint.manifest_problem(root / "step_2")
        == "actor/shards/0.bin does not match its SHA-256 in the manifest"
    )
    assert checkpoint.latest(tmp_path) == root / "step_1"
    (root / "step_1" / "actor" / "weights.bin").unlink()
    assert checkpoint.latest(tmp_path) is None  # nothing sound left: start afresh, said in the log
    assert "actor/weights.bin is missing" in caplog.text


def test_a_checkpoint_without_a_manifest_still_loads(tmp_path):
    checkpoint.save(tmp_path, 1, roles(), {"global_step": 1})
    (tmp_path / "checkpoints" / "step_1" / checkpoint.MANIFEST).unlink()  # written before manifests
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step_1"


# Real full and read-only file systems, in a private mount namespace (no root needed beyond a user
# namespace): a tmpfs of 64 KiB, and the same tmpfs remounted read-only.
FULL_DISK = """
import sys, subprocess
from pathlib import Path
from tests.support.checkpoint_roles import roles, BigRole
from turnrl.trainer import checkpoint
from turnrl.workers.group import LocalGroup
run = Path(sys.argv[1]); mode = sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(run)], check=True)
checkpoint.save(run, 1, roles(), {"global_step": 1})
if mode == "ro":
    subprocess.run(["mount", "-o", "remount,ro", str(run)], check=True)
big = roles() if mode == "ro" else {"actor": LocalGroup([BigRole()])}
try:
    checkpoint.save(run, 2, big, {"global_step": 2})
except checkpoint.CheckpointError as e:
    print("ERROR:", e)
print("STEPS:", sorted(checkpoint.steps(run)), "LATEST:", checkpoint.latest(run).name)
print("LEFT:", sorted(p.name for p in (run / "checkpoints").iterdir()))
"""


@pytest.mark.parametrize(
    ("mode", "why"), [("full", "the disk is full"), ("ro", "the file system is read-only")]
)
def test_a_full_or_read_only_disk_fails_in_one_line_and_keeps_the_previous_checkpoint(tmp_path, mode, why):
    if subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user+mount namespaces here to make a small file system in")
    run = tmp_path / "run"
    run.mkdir()
    out = subprocess.run(
        ["unshare", "-Urm", sys.executable, "-c", FULL_DISK, str(run), mode],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    error = next(line for line in lines if line.startswith("ERROR:"))
    assert f"cannot write checkpoint {run}/checkpoints/step_2: {why}" in error
    assert f"the previous checkpoint {run}/checkpoints/step_1 is intact" in error
    assert "STEPS: [1] LATEST: step_1" in lines
    assert "LEFT: ['latest', 'step_1']" in lines  # no half-written temporary directory left behind


@pytest.mark.parametrize(
    "pointer",
    [
        "x" * 3000,  # longer than a file name may be (ENAMETOOLONG)
        b"\xff\xfestep_2",  # not UTF-8
        "step_1/../../../../../other_run/checkpoints/step_2",  # another run's checkpoint
        "/abs/step_2",
        "step_2/actor",
    ],
    ids=["too-long", "not-utf8", "another-run", "absolute", "below-a-step"],
)
def test_latest_pointer_naming_no_sibling_step_is_skipped_with_the_warning(tmp_path, caplog, pointer):
    other = tmp_path / "other_run"
    for step in (1, 2):
        checkpoint.save(other, step, roles(), {"global_step": step})
    run = tmp_path / "a" / "b" / "run"
    checkpoint.save(run, 1, roles(), {"global_step": 1})
    latest = run / "checkpoints" / "latest"
    latest.write_bytes(pointer if isinstance(pointer, bytes) else pointer.encode())
    assert checkpoint.latest(run) == run / "checkpoints" / "step_1"
    assert (
        f"checkpoint pointer {latest} does not name a usable checkpoint; using {run}/checkpoints/step_1"
        in caplog.text
    )


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ("{not json", "trainer_state.json is not JSON"),
        (b"\xff\xfe{}", "trainer_state.json is not JSON"),
        ("[1, 2]", "trainer_state.json has no integer global_step"),
        ('{"global_step": "2"}', "trainer_state.json has no integer global_step"),
    ],
)
def test_a_checkpoint_without_manifest_and_a_garbage_trainer_state_is_skipped(
    tmp_path, caplog, state, problem
):
    for step in (1, 2):
        checkpoint.save(tmp_path, step, roles(), {"global_step": step})
    step_2 = tmp_path / "checkpoints" / "step_2"
    (step_2 / checkpoint.MANIFEST).unlink()  # written before manifests: the trainer state is all there is
    (step_2 / checkpoint.TRAINER_STATE).write_bytes(state if isinstance(state, bytes) else state.encode())
    assert checkpoint.manifest_problem(step_2) == problem
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step_1"
    assert f"skipping corrupt checkpoint {step_2}: {problem}" in caplog.text


def test_a_save_refused_by_latest_names_it_and_the_checkpoint_that_was_there(tmp_path):
    checkpoint.save(tmp_path, 1, roles(), {"global_step": 1})
    latest = tmp_path / "checkpoints" / "latest"
    latest.unlink()
    latest.mkdir()  # made by hand after `make_run_dir` looked (that check is in test_resume_damaged_run)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.save(tmp_path, 2, roles(), {"global_step": 2})
    assert f"({latest});" in str(err.value)
    assert str(err.value).endswith(f"the previous checkpoint {tmp_path}/checkpoints/step_1 is intact")
    assert not (tmp_path / "checkpoints" / ".latest.tmp").exists()
