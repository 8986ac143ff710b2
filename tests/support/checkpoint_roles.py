"""Roles whose saved state is a few small files (or one of 200 kB), for checkpoint tests that run
in a subprocess under a tiny file system too."""

from pathlib import Path

from turnrl.workers.group import LocalGroup


class FileRole:
    """A role whose state is two files in a subdirectory."""

    def save(self, directory: Path) -> None:
        (directory / "shards").mkdir(parents=True)
        (directory / "weights.bin").write_bytes(b"w" * 100)
        (directory / "shards" / "0.bin").write_bytes(b"s")


def roles() -> dict:
    return {"actor": LocalGroup([FileRole()])}


class BigRole:
    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True)
        (directory / "weights.bin").write_bytes(b"w" * 200_000)
