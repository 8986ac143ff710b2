"""SandboxFusion's `/run_code` request and response, and the checks that turn a request into a run.

Request (SandboxFusion field names):
    {"code": str, "language": "python", "run_timeout": 10, "compile_timeout": 10,
     "memory_limit_MB": -1, "stdin": "", "files": {path: base64}, "fetch_files": [path]}
Response:
    {"status": "Success"|"Failed"|"SandboxError", "message": str, "compile_result": null,
     "run_result": {"status": "Finished"|"Error"|"TimeLimitExceeded", "execution_time": float,
                    "return_code": int|null, "stdout": str, "stderr": str},
     "executor_pod_name": null, "files": {path: base64}}

Every refusal is a `BadRequest` whose message is one line starting with the field's name; a
bound the server sets names the option that raises it. The body is parsed here (`parse_request`),
not by FastAPI, so a body sent without the JSON content type, or not in UTF-8, gets the same
one-line refusal as any other.
"""

from __future__ import annotations

import base64
import binascii
import math
import posixpath
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, ValidationError

from turnrl.servers.refusal import Refusal
from turnrl.servers.sandbox.config import Language, SandboxConfig
from turnrl.servers.validation import StrictRequest
from turnrl.servers.validation import describe_validation_error as describe


class BadRequest(Refusal):
    """A request the server will not run; `str(err)` names the field."""

    default_status = 422


class RunCodeRequest(StrictRequest):  # unknown fields and wrong JSON types refused
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
EXAMPLE = '{"code": "...", "language": "python"}'
NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits on a file name and a path, in bytes
MAX_DEPTH = 64  # directories above a file: writing deeper recurses in os.makedirs past Python's limit
SHOWN = 80  # characters of a client's string quoted back in a refusal


def shown(text: str) -> str:
    """`text` quoted for a one-line message: escaped (no newline gets through) and cut short (a
    megabyte-long name is not echoed back)."""
    quoted = repr(text)
    return quoted if len(quoted) <= SHOWN else quoted[: SHOWN - 4] + "...'"


def one_line(message: str, limit: int = 400) -> str:
    """`message` with control characters escaped and cut to `limit` characters (pydantic quotes
    field names as sent, newlines and all)."""
    clean = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def parse_request(body: bytes) -> RunCodeRequest:
    """The request in `body`, whatever its content type, or a one-line BadRequest."""
    if not body.strip():
        raise BadRequest(describe_validation_error([{"type": "missing", "loc": ("body",)}]))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequest(
            f"request body: not valid UTF-8 ({err.reason} at byte {err.start}); send JSON encoded as UTF-8",
            400,
        ) from None
    try:
        return RunCodeRequest.model_validate_json(text)
    except ValidationError as err:
        raise BadRequest(describe_validation_error(list(err.errors()))) from None


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
        raise BadRequest(
            f"{name}: must be > 0 and <= {cfg.max_run_timeout:g} seconds, got {value!r} (--max-run-timeout)"
        )
    return float(value)


def check_relative_path(name: str, path: str) -> str:
    """A normalised path inside the work directory, or BadRequest naming `name`."""
    if not path or "\x00" in path:
        raise BadRequest(f"{name}: path must be a non-empty string without NUL bytes")
    if path.startswith("/"):
        raise BadRequest(
            f"{name}: absolute paths are not allowed ({shown(path)}); use a path relative to the work dir"
        )
    norm = posixpath.normpath(path)
    if norm == "." or norm == ".." or norm.startswith("../"):
        raise BadRequest(f"{name}: path {shown(path)} leaves the work directory")
    size = len(norm.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX or any(
        len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in norm.split("/")
    ):
        raise BadRequest(f"{name}: path too long ({size} bytes; at most {PATH_MAX}, and {NAME_MAX} per name)")
    depth = norm.count("/")
    if depth > MAX_DEPTH:
        raise BadRequest(f"{name}: path {depth} directories deep; at most {MAX_DEPTH}")
    return norm


def check_file_count(raw: dict[str, str | None], cfg: SandboxConfig) -> None:
    if len(raw) > cfg.max_files:
        raise BadRequest(
            f"files: {len(raw)} files exceeds the server limit of {cfg.max_files} (--max-files)", 413
        )


def decode_file(name: str, content: str | None, total: int, cfg: SandboxConfig) -> bytes:
    """One request file's bytes, `total` the bytes decoded before it: within the request's cap."""
    try:
        data = base64.b64decode(content or "", validate=True)
    except (binascii.Error, ValueError) as err:
        raise BadRequest(f"{name}: invalid base64 ({err})") from None
    if total + len(data) > cfg.max_files_bytes:
        raise BadRequest(
            f"files: decoded size exceeds the server limit of {cfg.max_files_bytes} bytes (--max-files-bytes)",
            413,
        )
    return data


def _decode_files(raw: dict[str, str | None], reserved: str, cfg: SandboxConfig) -> dict[str, bytes]:
    check_file_count(raw, cfg)
    out: dict[str, bytes] = {}
    total = 0
    for path, content in raw.items():
        name = f"files[{shown(path)}]"
        norm = check_relative_path(name, path)
        if norm == reserved or norm.startswith(reserved + "/"):
            raise BadRequest(f"{name}: {reserved!r} is where the program's code is written; rename the file")
        if norm in out:  # "a" and "./a": the second would silently replace the first
            raise BadRequest(f"{name}: the same file as another entry ({shown(norm)})")
        out[norm] = decode_file(name, content, total, cfg)
        total += len(out[norm])
    return out


def check_request(req: RunCodeRequest, cfg: SandboxConfig, languages: dict[str, Language]) -> RunSpec:
    """Apply the server's bounds to a parsed request."""
    lang = languages.get(req.language)
    if lang is None:
        raise BadRequest(
            f"language: unsupported {shown(req.language)}; this server runs {', '.join(sorted(languages))}"
        )
    code = req.code.encode("utf-8", "surrogatepass")
    if len(code) > cfg.max_code:
        raise BadRequest(
            f"code: {len(code)} bytes exceeds the server limit of {cfg.max_code} bytes (--max-code)", 413
        )
    stdin = (req.stdin or "").encode("utf-8", "surrogatepass")
    if len(stdin) > cfg.max_stdin:
        raise BadRequest(
            f"stdin: {len(stdin)} bytes exceeds the server limit of {cfg.max_stdin} bytes (--max-stdin)", 413
        )
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
    if len(req.fetch_files) > cfg.max_files:
        raise BadRequest(
            f"fetch_files: {len(req.fetch_files)} paths exceeds the server limit of {cfg.max_files} (--max-files)",
            413,
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
    return one_line(describe(errors, FIELDS, EXAMPLE))


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
