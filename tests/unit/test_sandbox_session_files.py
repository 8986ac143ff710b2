"""A sandbox session's files on the host, without a server: where file API paths land, that links
and special files are never followed or opened, and how a tree's usage is measured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnrl.servers.sandbox import session_files
from turnrl.servers.sandbox.schema import BadRequest
from turnrl.servers.sandbox.session_files import PathRefused, api_parts, measure, read_file, write_file
from turnrl.servers.sandbox.sessions import command_result


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = tmp_path / "session"
    path.mkdir()
    session_files.make_root(str(path), None)
    return str(path)


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("x.py", ("app", "x.py")),
        ("src/x.py", ("app", "src", "x.py")),
        ("/app/src/x.py", ("app", "src", "x.py")),
        ("/tests/test.sh", ("tests", "test.sh")),
        ("/logs/verifier/reward.txt", ("logs", "verifier", "reward.txt")),
        ("./a/./b", ("app", "a", "b")),
        ("//app//x", ("app", "x")),
        ("../tests/t.sh", ("tests", "t.sh")),  # stays in the session: /tests/t.sh
    ],
)
def test_paths_map_into_the_session(path: str, parts: tuple[str, ...]) -> None:
    assert api_parts(path, 64) == parts


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/shadow",
        "../../etc/passwd",
        "/app/../etc/passwd",
        "/app",
        "/tmp/x",
        "/",
        "a\x00b",
        "/application",
    ],
)
def test_paths_out_of_the_session_are_refused(path: str) -> None:
    with pytest.raises(PathRefused) as err:
        api_parts(path, 64)
    assert err.value.status == 400


def test_host_paths_of_the_session_itself_are_accepted_where_commands_see_them() -> None:
    assert api_parts("/w/s1/app/x", 64, host_root="/w/s1") == ("app", "x")
    with pytest.raises(PathRefused):
        api_parts("/w/s2/app/x", 64, host_root="/w/s1")


def test_depth_and_length_bounds() -> None:
    with pytest.raises(PathRefused, match="levels deep"):
        api_parts("/".join(["d"] * 10), 5)
    with pytest.raises(PathRefused, match="too long"):
        api_parts("x" * 300, 64)


def test_write_then_read_round_trip_makes_dirs(root: str) -> None:
    write_file(root, ("app", "a", "b", "c.txt"), b"hello", None)
    assert read_file(root, ("app", "a", "b", "c.txt"), 1 << 20, None) == b"hello"
    write_file(root, ("app", "a", "b", "c.txt"), b"x", None)  # replaced, not appended
    assert read_file(root, ("app", "a", "b", "c.txt"), 1 << 20, None) == b"x"


def test_missing_file_is_404_and_large_file_413(root: str) -> None:
    with pytest.raises(BadRequest) as err:
        read_file(root, ("app", "nope"), 100, None)
    assert err.value.status == 404
    write_file(root, ("app", "big"), b"x" * 101, None)
    with pytest.raises(BadRequest) as err:
        read_file(root, ("app", "big"), 100, None)
    assert err.value.status == 413


def test_symlinks_are_never_followed(root: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    os.symlink(str(outside), os.path.join(root, "app", "link"))
    os.symlink("/etc", os.path.join(root, "app", "dirlink"))
    for parts in [("app", "link"), ("app", "dirlink", "passwd")]:
        with pytest.raises(PathRefused, match="symbolic link"):
            read_file(root, parts, 1 << 20, None)
        with pytest.raises(PathRefused, match="symbolic link"):
            write_file(root, parts, b"clobbered", None)
    assert outside.read_text() == "host secret"


def test_fifo_and_directory_are_refused(root: str) -> None:
    os.mkfifo(os.path.join(root, "app", "fifo"))
    with pytest.raises(PathRefused, match="not a regular file"):
        read_file(root, ("app", "fifo"), 100, None)
    with pytest.raises(PathRefused):
        write_file(root, ("app", "fifo"), b"x", None)
    os.mkdir(os.path.join(root, "app", "d"))
    with pytest.raises(PathRefused, match="not a regular file"):
        read_file(root, ("app", "d"), 100, None)


def test_a_hard_link_to_a_file_of_another_owner_is_refused(root: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a file of another owner")
    other = tmp_path / "other.txt"
    other.write_text("not yours")
    os.chown(other, 12345, 12345)
    os.link(other, os.path.join(root, "app", "hard"))
    with pytest.raises(PathRefused, match="hard link"):
        read_file(root, ("app", "hard"), 100, 4242)
    with pytest.raises(PathRefused, match="hard link"):
        write_file(root, ("app", "hard"), b"x", 4242)


def test_measure_counts_and_stops_at_limits(root: str) -> None:
    for i in range(10):
        write_file(root, ("app", f"f{i}"), b"x" * 5000, None)
    usage = measure(root, 1 << 30, 1000, 64)
    assert usage.over == "" and usage.entries >= 10 and usage.bytes >= 10 * 4096
    assert "over the limit of 5" in measure(root, 1 << 30, 5, 64).over
    assert "quota" in measure(root, 10_000, 1000, 64).over


def test_measure_stops_at_the_depth_limit_without_following_links(root: str) -> None:
    path = os.path.join(root, "app")
    for _ in range(20):
        path = os.path.join(path, "d")
        os.mkdir(path)
    os.symlink("/", os.path.join(root, "app", "slash"))  # would be a huge tree if followed
    assert measure(root, 1 << 30, 1000, 64).over == ""
    assert "deeper than 10" in measure(root, 1 << 30, 1000, 10).over


def test_command_result_shape() -> None:
    run = {"status": "Finished", "execution_time": 0.1, "return_code": 3, "stdout": "o", "stderr": "e"}
    out = command_result({"status": "Failed", "message": "", "run_result": run}, "")
    assert out == {
        "return_code": 3,
        "stdout": "o",
        "stderr": "e",
        "timed_out": False,
        "execution_time": 0.1,
        "status": "Finished",
        "message": "",
    }
    timed = {**run, "status": "TimeLimitExceeded", "return_code": None}
    assert command_result({"status": "Failed", "run_result": timed}, "")["timed_out"] is True
    stopped = command_result({"status": "Failed", "run_result": run}, "quota")
    assert stopped["status"] == "Error" and "passed its limits (quota)" in stopped["message"]
    assert "the command was killed" not in stopped["message"]  # it ended before the watcher saw it
    killed = command_result({"status": "Failed", "run_result": run}, "quota", killed=True)
    assert killed["status"] == "Error" and "the command was killed" in killed["message"]
