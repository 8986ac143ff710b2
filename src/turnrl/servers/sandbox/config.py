"""Server settings and per-run limits of the code sandbox.

One dataclass holds everything `turnrl sandbox serve` can tune; the request schema reads
its bounds from here so that an absurd `run_timeout` is refused with the server's own
limit in the message.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Language:
    """How to run one language: the file the code is written to and the command that runs it."""

    name: str
    filename: str
    argv: tuple[str, ...]  # the program file is appended


def default_languages(python: str | None = None) -> dict[str, Language]:
    """python (the interpreter running the server, so the program sees the same packages) and bash."""
    langs = {"python": Language("python", "main.py", (python or sys.executable,))}
    bash = shutil.which("bash")
    if bash:
        langs["bash"] = Language("bash", "main.sh", (bash,))
    return langs


WORKERS_PER_CPU = 64
"""Workers per CPU at most: runs beyond that only share the CPUs (a CPU-bound run then gets a 64th
of one within its wall-clock timeout), and each worker holds a prepared sandbox process and two
cgroups, made at start-up (`--workers 100000` was still making cgroups minutes later, silent)."""
MAX_RUN_TIMEOUT_S = 86_400
"""The largest `--max-run-timeout`: a day (a request could otherwise ask for `run_timeout` 1e300,
whose CPU-time rlimit overflows)."""


UIDS_PER_SERVER = 1024
"""uids one root server claims (probe.UID_STRIDE): one per worker slot and one per session."""
MAX_SESSION_TTL_S = 7 * 86_400
"""The largest `--session-max-ttl-s`: a week."""


def cpu_count() -> int:
    return os.cpu_count() or 1


def max_workers() -> int:
    """The largest `--workers` on this machine (`WORKERS_PER_CPU` per CPU)."""
    return WORKERS_PER_CPU * cpu_count()


@dataclass
class SandboxConfig:
    """Settings of one sandbox server. Sizes are bytes unless the name says MB."""

    host: str = "127.0.0.1"
    """Interface to bind; keep 127.0.0.1 unless the trainers run on other machines."""
    port: int = 8080
    """TCP port to listen on."""
    api_key: str = field(default="", repr=False)  # never in a logged or printed config
    """Key every request must send (`Authorization: Bearer KEY` or `X-API-Key: KEY`), /health
    included; empty = no key, which is allowed on a loopback `host` only."""
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    """Runs executing at the same time, at most 64 per CPU (WORKERS_PER_CPU)."""
    queue: int = 256
    """Requests allowed to wait for a free worker; one more is answered 503 at once."""
    isolation: str = "auto"
    """"auto": every layer the host supports; "basic": process group, work dir, rlimits and a
    scrubbed environment only (for hosts where namespaces misbehave, and for measuring)."""

    cgroup: bool = True
    """Put each run in a cgroup capping its total memory and process count (root only); without
    it memory is capped per process only. Joining one waits for an RCU grace period, which the
    zygote's prepared sandboxes do before the request comes."""
    rootfs: bool = True
    """Run programs in a minimal read-only root (needs the mount namespace): the interpreter and its
    libraries, /usr/bin and /usr/lib, and nothing else of the host's files."""
    seccomp: bool = True
    """Install a seccomp filter denying ptrace, mount, unshare, bpf, kexec, module loading and the
    like, in the program's own process right before its exec."""
    zygote: bool = True
    """Run each request in a sandbox that a small warm process (the zygote) prepared for its
    worker slot ahead of time (namespaces, root, init, cgroup), instead of forking the server and
    setting all of it up while the request waits. Each sandbox serves one request."""

    default_run_timeout: float = 10.0
    """Wall-clock seconds a run gets when the request omits run_timeout (SandboxFusion's default)."""
    max_run_timeout: float = 300.0
    """Largest run_timeout or compile_timeout a request may ask for."""
    default_memory_MB: int = 1024
    """Address-space limit when the request sends memory_limit_MB = -1 (SandboxFusion's "no limit")."""
    min_memory_MB: int = 64
    """Below this the interpreter itself cannot start, so smaller requests are refused."""
    max_memory_MB: int = 16384
    """Largest memory_limit_MB a request may ask for."""
    max_processes: int = 64
    """Processes and threads one run may hold at once (fork-bomb bound)."""
    max_open_files: int = 256
    """File descriptors per process."""
    max_file_size: int = 64 << 20
    """Largest single file a run may write (RLIMIT_FSIZE)."""
    tmpfs_MB: int = 64
    """Size of the private /tmp, /var/tmp and /dev/shm a run sees when the mount layer is on."""
    max_output: int = 1 << 20
    """Bytes kept of stdout and of stderr each; the rest is read and dropped."""
    max_code: int = 1 << 20
    """Largest `code` string, in bytes (`--max-code`)."""
    max_stdin: int = 8 << 20
    """Largest `stdin` string, in bytes (`--max-stdin`)."""
    max_files: int = 256
    """Most entries in `files`, and in `fetch_files` (`--max-files`): each is a file written or
    read per run, and a request of a million empty ones would keep a worker busy for nothing."""
    max_files_bytes: int = 32 << 20
    """Largest total size of the decoded `files` (`--max-files-bytes`)."""
    max_fetch: int = 16 << 20
    """Largest total size of the files returned through `fetch_files`."""
    max_body: int = 64 << 20
    """Largest request body accepted at all (`--max-body`), counted while it streams in, so a
    chunked body without Content-Length is refused as soon as it passes the limit."""
    max_sessions: int = 64
    """Sessions (persistent workspaces, `POST /sessions`) alive at once; one more is answered 503.
    With the uid layer each holds a uid of its own for its lifetime."""
    session_ttl_s: float = 900.0
    """Lifetime of a session whose request sends no `ttl_s`; then it and its files are removed."""
    session_max_ttl_s: float = 14_400.0
    """Largest `ttl_s` a session may ask for (seconds)."""
    session_disk_bytes: int = 512 << 20
    """Disk a session's files may take (its /app, /tests, /logs together, as du counts them)."""
    session_max_files: int = 20_000
    """Files, directories and links a session may hold."""
    session_max_depth: int = 128
    """Directory levels a session's tree may have (a deeper tree counts as over its file limit)."""
    uid_base: int = 200_000
    """First uid of the unprivileged uids runs execute as when the server is root; each server
    claims its own block of `workers` uids (see isolation.claim_uid_block)."""
    python: str = field(default_factory=lambda: sys.executable)
    """Interpreter for language "python"."""

    def languages(self) -> dict[str, Language]:
        return default_languages(self.python)

    def check(self) -> None:
        """Refuse settings that cannot work, naming the setting."""
        if self.workers < 1:
            raise ValueError(f"workers: must be >= 1, got {self.workers}")
        if self.workers > max_workers():
            raise ValueError(
                f"--workers {self.workers}: at most {max_workers()} here ({WORKERS_PER_CPU} per CPU, "
                f"{cpu_count()} CPUs): each worker is a run at once, with a prepared sandbox process "
                f"and two cgroups of its own"
            )
        if self.queue < 0:
            raise ValueError(f"queue: must be >= 0, got {self.queue}")
        if self.isolation not in ("auto", "basic"):
            raise ValueError(f"isolation: must be 'auto' or 'basic', got {self.isolation!r}")
        longest, default = self.max_run_timeout, self.default_run_timeout
        if not (math.isfinite(longest) and longest > 0):
            raise ValueError(f"--max-run-timeout {longest:g}: must be finite and > 0")
        if longest > MAX_RUN_TIMEOUT_S:
            raise ValueError(f"--max-run-timeout {longest:g}: at most {MAX_RUN_TIMEOUT_S} seconds (a day)")
        if not (math.isfinite(default) and default > 0):
            raise ValueError(f"default_run_timeout: must be finite and > 0, got {default:g}")
        if default > longest:
            raise ValueError(
                f"--max-run-timeout {longest:g}: must be >= {default:g}, the run_timeout of a request "
                f"that sends none (default_run_timeout)"
            )
        if not self.min_memory_MB <= self.default_memory_MB <= self.max_memory_MB:
            raise ValueError(
                f"default_memory_MB: must be in [{self.min_memory_MB}, {self.max_memory_MB}], "
                f"got {self.default_memory_MB}"
            )
        if self.max_sessions < 0:
            raise ValueError(f"--max-sessions {self.max_sessions}: must be >= 0")
        ttl, longest_ttl = self.session_ttl_s, self.session_max_ttl_s
        if not (math.isfinite(longest_ttl) and 0 < longest_ttl <= MAX_SESSION_TTL_S):
            raise ValueError(
                f"--session-max-ttl-s {longest_ttl:g}: must be > 0 and at most {MAX_SESSION_TTL_S}"
            )
        if not (math.isfinite(ttl) and 0 < ttl <= longest_ttl):
            raise ValueError(
                f"--session-ttl-s {ttl:g}: must be > 0 and <= --session-max-ttl-s {longest_ttl:g}"
            )
        if self.session_max_depth < 1:
            raise ValueError(f"session_max_depth: must be >= 1, got {self.session_max_depth}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be in [0, 65535], got {self.port}")
        for name in (
            "max_code",
            "max_stdin",
            "max_files",
            "max_files_bytes",
            "max_fetch",
            "max_body",
            "max_output",
            "session_disk_bytes",
            "session_max_files",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
