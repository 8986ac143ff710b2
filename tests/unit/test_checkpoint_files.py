"""checkpoint.save: durable (every file and directory fsynced before the renames that publish it),
pruned to `keep`, and `latest` falls back to the newest complete checkpoint when it names none."""

import os
from pathlib import Path

from turnrl.trainer import checkpoint
from turnrl.workers.group import LocalGroup


class FileRole:
    """A role whose state is two files in a subdirectory."""

    def save(self, directory: Path) -> None:
        (directory / "shards").mkdir(parents=True)
        (directory / "weights.bin").write_bytes(b"w" * 100)
        (directory / "shards" / "0.bin").write_bytes(b"s")


def roles() -> dict:
    return {"actor": LocalGroup([FileRole()])}


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
