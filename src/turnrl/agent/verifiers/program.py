"""verifiers' chat program, run in this interpreter, and the dependencies a harness script declares."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

# --- verifiers' chat program, in this interpreter ------------------------------------------------------

_prepared = threading.Lock()
_chat_program_ready = False


def run_chat_program_here() -> None:
    """Let verifiers' built-in chat harnesses (`null`, `bash`) run without `uv` or a network.

    They run a PEP 723 script whose environment verifiers builds with `uv sync --script` (downloads)
    on first use. Every package it declares comes with turnrl's `verifiers` extra, so when this
    interpreter satisfies them all, the script is registered in the subprocess runtime's own
    per-script interpreter cache (where `prepare_uv_script` looks before calling uv) as run by this
    interpreter. Anything else (other harnesses, container runtimes) still prepares with uv.
    """
    global _chat_program_ready
    with _prepared:
        if _chat_program_ready:
            return
        _chat_program_ready = True
        try:
            from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
            from verifiers.v1.runtimes.subprocess import SubprocessRuntime
        except ImportError:  # another verifiers layout: leave preparation to verifiers
            return
        cache = getattr(SubprocessRuntime, "_interpreters", None)
        if not isinstance(cache, dict) or not _satisfied(script_dependencies(CHAT_PROGRAM_SOURCE)):
            return
        digest = hashlib.sha256(CHAT_PROGRAM_SOURCE.encode()).hexdigest()
        path = Path(SubprocessRuntime.scripts_dir) / f"{digest}.py"
        if str(path) in cache:
            return
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(CHAT_PROGRAM_SOURCE)
            os.replace(tmp, path)  # a reader never sees half a script
        except OSError:  # an unwritable cache: verifiers prepares the script itself, with uv
            tmp.unlink(missing_ok=True)
            return
        cache[str(path)] = sys.executable


def script_dependencies(source: str) -> list[str]:
    """The `dependencies` of a PEP 723 `# /// script` block ([] without one)."""
    block = re.search(r"^# /// script\s*$(.*?)^# ///\s*$", source, re.MULTILINE | re.DOTALL)
    if block is None:
        return []
    toml = "\n".join(line.removeprefix("#").removeprefix(" ") for line in block.group(1).splitlines())
    import tomllib

    return list(tomllib.loads(toml).get("dependencies", []))


def _satisfied(requirements: list[str]) -> bool:
    from packaging.requirements import Requirement

    for text in requirements:
        req = Requirement(text)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(version, prereleases=True):
            return False
    return True
