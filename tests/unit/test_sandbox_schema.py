"""Request checks of the sandbox server: bounds, paths, base64, one-line error messages."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from turnrl.servers.sandbox.config import SandboxConfig
from turnrl.servers.sandbox.schema import (
    BadRequest,
    RunCodeRequest,
    check_relative_path,
    check_request,
    describe_validation_error,
    parse_request,
)

CFG = SandboxConfig(max_run_timeout=60, default_run_timeout=10, max_code=100, max_files=2, max_files_bytes=10)
LANGS = CFG.languages()


def checked(**fields: object):
    return check_request(RunCodeRequest(**{"code": "print(1)", **fields}), CFG, LANGS)


def test_defaults_follow_sandboxfusion() -> None:
    spec = checked()
    assert spec.language.name == "python" and spec.language.filename == "main.py"
    assert spec.run_timeout == 10 and spec.memory_MB == CFG.default_memory_MB  # -1 = server default
    assert spec.stdin == b"" and spec.files == {} and spec.fetch_files == []


def test_null_stdin_and_null_file_content_are_empty() -> None:
    spec = checked(stdin=None, files={"empty.txt": None})
    assert spec.stdin == b"" and spec.files == {"empty.txt": b""}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"run_timeout": 0}, "run_timeout: must be > 0 and <= 60 seconds, got 0"),
        ({"run_timeout": 61}, "run_timeout: must be > 0 and <= 60 seconds, got 61"),
        ({"run_timeout": float("inf")}, "run_timeout: must be > 0"),
        ({"compile_timeout": -2}, "compile_timeout: must be > 0"),
        ({"memory_limit_MB": 0}, "memory_limit_MB: must be -1 (server default) or in [64, 16384], got 0"),
        ({"memory_limit_MB": -2}, "memory_limit_MB: must be -1"),
        ({"language": "rust"}, "language: unsupported 'rust'; this server runs bash, python"),
        ({"code": "x" * 101}, "code: 101 bytes exceeds the server limit of 100 bytes"),
        (
            {"files": {"a": base64.b64encode(b"x" * 11).decode()}},
            "files: decoded size exceeds the server limit of 10 bytes (--max-files-bytes)",
        ),
        ({"files": dict.fromkeys("abc", "")}, "files: 3 files exceeds the server limit of 2 (--max-files)"),
        (
            {"fetch_files": ["a", "b", "c"]},
            "fetch_files: 3 paths exceeds the server limit of 2 (--max-files)",
        ),
        ({"files": {"a": "", "./a": ""}}, "files['./a']: the same file as another entry ('a')"),
        (
            {"files": {"main.py/x": ""}},
            "files['main.py/x']: 'main.py' is where the program's code is written",
        ),
        ({"files": {"x" * 256: ""}}, "files['xxxxx"),
        ({"files": {"a\nb/../../x": ""}}, "files['a\\nb/../../x']: path 'a\\nb/../../x' leaves"),
        ({"files": {"a": "@@"}}, "files['a']: invalid base64"),
        (
            {"fetch_files": ["ok.txt", "a/../../x"]},
            "fetch_files[1]: path 'a/../../x' leaves the work directory",
        ),
        ({"fetch_files": [""]}, "fetch_files[0]: path must be a non-empty string"),
    ],
)
def test_refusals_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest) as err:
        checked(**fields)
    assert str(err.value).startswith(message)


def test_long_names_are_refused_and_cut_short_in_the_message() -> None:
    with pytest.raises(BadRequest) as err:
        checked(files={"x" * 256: ""})
    message = str(err.value)
    assert "path too long (256 bytes; at most 4096, and 255 per name)" in message and len(message) < 200
    with pytest.raises(BadRequest, match="path too long"):
        checked(fetch_files=["/".join(["d" * 200] * 30)])


def test_bodies_are_parsed_whatever_their_shape() -> None:
    assert parse_request(b'{"code": "print(1)"}').code == "print(1)"
    for body, status, start in [
        (b"", 422, "request body: missing; expected a JSON object like"),
        (b'{"code": "\xff"}', 400, "request body: not valid UTF-8 (invalid start byte at byte 10)"),
        (b'{"code": ', 422, "request body: not valid JSON"),
        (b"[" * 10_000, 422, "request body: not valid JSON (recursion limit exceeded"),
        (b'{"code": "1", "run_timout": 1}', 422, "run_timout: unknown field; did you mean 'run_timeout'?"),
        (b'{"code": "1", "x\\ny": 1}', 422, "x\\ny: unknown field"),  # no newline gets through
    ]:
        with pytest.raises(BadRequest) as err:
            parse_request(body)
        assert err.value.status == status and str(err.value).startswith(start), str(err.value)
        assert "\n" not in str(err.value)


def test_oversized_inputs_are_413() -> None:
    with pytest.raises(BadRequest) as err:
        checked(code="x" * 101)
    assert err.value.status == 413


def test_relative_paths_are_normalised() -> None:
    assert check_relative_path("f", "a/./b/../c.txt") == "a/c.txt"
    assert checked(files={"sub/x.txt": ""}).files == {"sub/x.txt": b""}
    with pytest.raises(BadRequest, match="leaves the work directory"):
        check_relative_path("f", "..")
    with pytest.raises(BadRequest, match="NUL"):
        check_relative_path("f", "a\x00b")


def _errors(**body: object) -> list[dict]:
    with pytest.raises(ValidationError) as err:
        RunCodeRequest.model_validate(body)
    return err.value.errors()


def test_validation_errors_become_one_line() -> None:
    assert describe_validation_error(_errors()) == "code: Field required"
    line = describe_validation_error(_errors(code="1", langauge="python"))
    assert line == "langauge: unknown field; did you mean 'language'?"
    line = describe_validation_error(_errors(code=1, run_timeout="x"))
    assert line.startswith("code: Input should be a valid string (and 1 more problem)")
    assert describe_validation_error(
        [{"type": "json_invalid", "loc": ("body", 9), "ctx": {"error": "bad"}}]
    ) == ("request body: not valid JSON (bad)")
    nested = describe_validation_error(_errors(code="1", files={"a": 3}))
    assert nested.startswith("files.a: Input should be a valid string")


def test_config_check_names_the_setting() -> None:
    with pytest.raises(ValueError, match="workers: must be >= 1, got 0"):
        SandboxConfig(workers=0).check()
    with pytest.raises(ValueError, match="isolation: must be 'auto' or 'basic'"):
        SandboxConfig(isolation="paranoid").check()
    with pytest.raises(ValueError, match="default_run_timeout"):
        SandboxConfig(default_run_timeout=500).check()


def test_a_path_deeper_than_makedirs_can_go_is_a_422_naming_the_file() -> None:
    """2,000 directories fit in PATH_MAX ("d/" x 2000 = 4,000 bytes) but writing the file would recurse
    in os.makedirs past Python's limit (a RecursionError, once a 200 with a SandboxError)."""
    deep = "d/" * 2000 + "f.txt"
    with pytest.raises(BadRequest) as err:
        checked(files={deep: ""})
    assert err.value.status == 422 and "path 2000 directories deep; at most 64" in str(err.value)
    assert str(err.value).startswith("files[")
    checked(files={"d/" * 64 + "f.txt": ""})  # at the limit: accepted
