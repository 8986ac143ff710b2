"""`turnrl.runtime.ensure_writable_dir`: the output-path check every command runs before any model
loads. It asks the OS (creating and removing for real), so root, read-only mounts and /proc are
judged right, and it leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnrl.errors import TurnrlInputError
from turnrl.models.loader import cache_root
from turnrl.runtime import ensure_writable_dir


def test_new_and_empty_directories_pass_and_nothing_is_created(tmp_path):
    assert ensure_writable_dir(tmp_path / "a" / "b" / "c", "--out") == tmp_path / "a" / "b" / "c"
    assert list(tmp_path.iterdir()) == []  # the probe's directories and file are gone
    (tmp_path / "empty").mkdir()
    ensure_writable_dir(tmp_path / "empty", "--out")
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "notes").write_text("a file\n")
    with pytest.raises(TurnrlInputError) as err:
        ensure_writable_dir(tmp_path / "notes", "--out")
    assert str(err.value) == f"--out {tmp_path / 'notes'}: is a file, not a directory"
    with pytest.raises(TurnrlInputError) as err:
        ensure_writable_dir(tmp_path / "notes" / "run", "--out")
    assert (
        str(err.value)
        == f"--out {tmp_path / 'notes' / 'run'}: {tmp_path / 'notes'} is a file, not a directory"
    )


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_the_os_reason_is_given_even_to_root():
    """/proc refuses every mkdir, though `os.access` tells root it may write there."""
    with pytest.raises(TurnrlInputError) as err:
        ensure_writable_dir(Path("/proc/x"), "--out")
    assert str(err.value) == "--out /proc/x: cannot create (No such file or directory)"
    with pytest.raises(TurnrlInputError) as err:
        ensure_writable_dir(Path("/proc/x/y"), "--out")
    assert str(err.value) == "--out /proc/x/y: cannot create /proc/x (No such file or directory)"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_directory_without_write_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(TurnrlInputError, match=r"cannot write into it \(Permission denied\)"):
            ensure_writable_dir(locked, "--out")
        with pytest.raises(TurnrlInputError, match=r"cannot create \(Permission denied\)"):
            ensure_writable_dir(locked / "run", "--out")
    finally:
        locked.chmod(0o755)


def test_the_caller_picks_the_error_class(tmp_path):
    class ReportError(ValueError):
        pass

    (tmp_path / "f").write_text("")
    with pytest.raises(ReportError, match="report directory"):
        ensure_writable_dir(tmp_path / "f", "report directory", ReportError)


def test_a_cache_that_is_a_file_is_named_by_where_it_came_from(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("hi\n")
    monkeypatch.delenv("TURNRL_CACHE", raising=False)
    assert cache_root(str(tmp_path / "cache")) == tmp_path / "cache"
    assert not (tmp_path / "cache").exists()  # resolving creates nothing
    with pytest.raises(TurnrlInputError) as err:
        cache_root(str(afile))
    assert str(err.value) == f"model.cache_dir {afile}: is a file, not a directory"
    with pytest.raises(TurnrlInputError) as err:
        cache_root(str(afile / "sub"), "--cache-dir")
    assert str(err.value) == f"--cache-dir {afile / 'sub'}: {afile} is a file, not a directory"
    monkeypatch.setenv("TURNRL_CACHE", str(afile))
    with pytest.raises(TurnrlInputError) as err:
        cache_root()
    assert str(err.value) == f"TURNRL_CACHE {afile}: is a file, not a directory"
    assert cache_root(str(tmp_path)) == tmp_path  # a cache directory given wins over the variable
    assert afile.read_text() == "hi\n"
