"""SandboxFusion's `/run_code` request and response, and the checks that turn a request into a run.

Request (SandboxFusion field names):
    {"code": str, "language": "python", "run_timeout": 10, "compile_timeout": 10,
     "memory_limit_MB": -1, "stdin": "", "files": {path: base64}, "fetch_files": [path]}
Response:
    {"status": "Success"|"Failed"|"SandboxError", "message": str, "compile_result": null,
     "run_result": {"status": "Finished"|"Error"|"TimeLimitExceeded", "execution_time": float,
                    "return_code": int|null, "stdout": str, "stderr": str},
     "executor_pod_name": null, "files": {path: base64}}

Every refusal is a `BadRequest` whose message is one line starting with the field's name.
"""

from __future__ import annotations

import base64
import binascii
import math
import posixpath
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from turnrl.servers.sandbox.config import Language, SandboxConfig
from turnrl.servers.validation import describe_validation_error as describe


class BadRequest(ValueError):
    """A request the server will not run; `str(err)` names the field."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


class RunCodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Program text.")
    language: str = Field(default="python", description="python or bash.")
    run_timeout: float | None = Field(default=None, description="Wall-clock seconds; null = server default.")
    compile_timeout: float | None = Field(
        default=None, description="Accepted for compatibility; checked only."
    )
    memory_limit_MB: int = Field(default=-1, description="Address-space limit; -1 = server default.")
    stdin: str | None = Field(default="", description="Text fed to the program's standard input.")
    files: dict[str, str | None] = Field(default_factory=dict, description="Path -> base64 content.")
    fetch_files: list[str] = Field(default_factory=list, description="Paths returned base64 in `files`.")


FIELDS = list(RunCodeRequest.model_fields)


@dataclass
class RunSpec:
    """A checked request: everything the runner needs, decoded."""

    code: bytes
    language: Language
    run_timeout: float
    memory_MB: int
    stdin: bytes
    files: dict[str, bytes] = field(default_factory=dict)
    fetch_files: list[str] = field(default_factory=list)


def _check_timeout(name: str, value: float | None, default: float, cfg: SandboxConfig) -> float:
    if value is None:
        return default
    if not math.isfinite(value) or value <= 0 or value > cfg.max_run_timeout:
        raise BadRequest(f"{name}: must be > 0 and <= {cfg.max_run_timeout:g} seconds, got {value!r}")
    return float(value)


def check_relative_path(name: str, path: str) -> str:
    """A normalised path inside the work directory, or BadRequest naming `name`."""
    if not path or "\x00" in path:
        raise BadRequest(f"{name}: path must be a non-empty string without NUL bytes")
    if path.startswith("/"):
        raise BadRequest(
            f"{name}: absolute paths are not allowed ({path!r}); use a path relative to the work dir"
        )
    norm = posixpath.normpath(path)
    if norm == "." or norm == ".." or norm.startswith("../"):
        raise BadRequest(f"{name}: path {path!r} leaves the work directory")
    return norm


def _decode_files(raw: dict[str, str | None], reserved: str, cfg: SandboxConfig) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    total = 0
    for path, content in raw.items():
        name = f"files[{path!r}]"
        norm = check_relative_path(name, path)
        if norm == reserved:
            raise BadRequest(f"{name}: {reserved!r} is where the program's code is written; rename the file")
        try:
            data = base64.b64decode(content or "", validate=True)
        except (binascii.Error, ValueError) as err:
            raise BadRequest(f"{name}: invalid base64 ({err})") from None
        total += len(data)
        if total > cfg.max_files:
            raise BadRequest(f"files: decoded size exceeds the server limit of {cfg.max_files} bytes", 413)
        out[norm] = data
    return out


def check_request(req: RunCodeRequest, cfg: SandboxConfig, languages: dict[str, Language]) -> RunSpec:
    """Apply the server's bounds to a parsed request."""
    lang = languages.get(req.language)
    if lang is None:
        raise BadRequest(
            f"language: unsupported {req.language!r}; this server runs {', '.join(sorted(languages))}"
        )
    code = req.code.encode("utf-8", "surrogatepass")
    if len(code) > cfg.max_code:
        raise BadRequest(f"code: {len(code)} bytes exceeds the server limit of {cfg.max_code} bytes", 413)
    stdin = (req.stdin or "").encode("utf-8", "surrogatepass")
    if len(stdin) > cfg.max_stdin:
        raise BadRequest(f"stdin: {len(stdin)} bytes exceeds the server limit of {cfg.max_stdin} bytes", 413)
    run_timeout = _check_timeout("run_timeout", req.run_timeout, cfg.default_run_timeout, cfg)
    _check_timeout("compile_timeout", req.compile_timeout, cfg.default_run_timeout, cfg)
    memory = req.memory_limit_MB
    if memory == -1:
        memory = cfg.default_memory_MB
    elif not cfg.min_memory_MB <= memory <= cfg.max_memory_MB:
        raise BadRequest(
            f"memory_limit_MB: must be -1 (server default) or in [{cfg.min_memory_MB}, {cfg.max_memory_MB}], "
            f"got {memory}"
        )
    fetch = [check_relative_path(f"fetch_files[{i}]", p) for i, p in enumerate(req.fetch_files)]
    return RunSpec(
        code=code,
        language=lang,
        run_timeout=run_timeout,
        memory_MB=memory,
        stdin=stdin,
        files=_decode_files(req.files, lang.filename, cfg),
        fetch_files=fetch,
    )


def describe_validation_error(errors: list[dict[str, Any]]) -> str:
    """pydantic's error list as one line that names the offending field."""
    return describe(errors, FIELDS, '{"code": "...", "language": "python"}')


def run_result(
    status: str,
    execution_time: float | None = None,
    return_code: int | None = None,
    stdout: str = "",
    stderr: str = "",
) -> dict[str, Any]:
    return {
        "status": status,
        "execution_time": execution_time,
        "return_code": return_code,
        "stdout": stdout,
        "stderr": stderr,
    }


def response(
    status: str, message: str, run: dict[str, Any] | None, files: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "status": status,
        "message": message,
        "compile_result": None,
        "run_result": run,
        "executor_pod_name": None,
        "files": files or {},
    }
