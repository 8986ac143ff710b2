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
)

CFG = SandboxConfig(max_run_timeout=60, default_run_timeout=10, max_code=100, max_files=10)
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
        ({"files": {"a": base64.b64encode(b"x" * 11).decode()}}, "files: decoded size exceeds"),
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
