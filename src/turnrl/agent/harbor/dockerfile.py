"""The starting files of a task's workspace, from its `environment/` folder.

The sandbox gives every session the same system (the host's bash and coreutils, the Python that runs
the server, with its packages) and an empty /app. So a task is accepted when its environment adds
nothing but files:
- no Dockerfile: every file under environment/ is placed under /app;
- a Dockerfile of `FROM <plain base>`, `WORKDIR` and `COPY` only: exactly those are interpreted
  (the copies placed, the last WORKDIR must be /app), and any other instruction is refused, since
  it would change the system (RUN, ENV, USER, ...) or copy from elsewhere (ADD, COPY --from).
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import shlex
from pathlib import Path

from turnrl.agent.harbor.spec import WORKSPACE, HarborTaskError

PLAIN_BASES = ("python", "debian", "ubuntu", "buildpack-deps")
"""Images whose files the sandbox's system stands in for (any tag). An image that brings its own tools
(a language runtime other than Python, a database, a task-specific base) is refused."""
COPY_FLAGS = ("--chown", "--chmod", "--link")
"""COPY options that change nothing the sandbox keeps (owners, modes, layering)."""


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction) with comments and blank lines dropped and `\\` continuations
    joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        start = start if pending else number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def is_plain_base(image: str) -> bool:
    """`python:3.12-slim`, `docker.io/library/ubuntu:24.04`: a plain base; `nvidia/cuda:12`, `node:20`,
    `ghcr.io/org/task-base`: not."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    for prefix in ("docker.io/", "index.docker.io/", "library/"):
        name = name.removeprefix(prefix)
    return name in PLAIN_BASES


def copy_args(task: str, where: str, rest: str) -> list[str]:
    """The sources and destination of a COPY (shell or JSON form), its harmless flags dropped."""
    if rest.startswith("["):
        try:
            args = json.loads(rest)
        except ValueError:
            raise HarborTaskError(task, f"{where}: COPY {rest} is not a JSON list") from None
    else:
        args = shlex.split(rest)
    words = [str(a) for a in args]
    for flag in (w for w in words if w.startswith("--")):
        if flag.split("=", 1)[0] not in COPY_FLAGS:
            raise HarborTaskError(task, f"{where}: COPY {flag} needs another image or build stage")
    words = [w for w in words if not w.startswith("--")]
    if len(words) < 2:
        raise HarborTaskError(task, f"{where}: COPY needs a source and a destination")
    return words


def context_files(context: Path) -> list[Path]:
    """Every regular file under the build context, in a fixed order (Python's byte-code caches left
    out: a local run of the files would otherwise change the task)."""
    return sorted(
        p for p in context.rglob("*") if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
    )


def sources(task: str, where: str, context: Path, pattern: str) -> list[tuple[Path, str]]:
    """(file, its path relative to the copied source) for one COPY source: a file, a folder (its
    contents), or a glob, always inside the context."""
    pattern = posixpath.normpath(pattern.lstrip("/")) if pattern.strip("/") else "."
    if pattern.startswith(".."):
        raise HarborTaskError(task, f"{where}: COPY {pattern} reaches outside environment/")
    depth = pattern.count("/")  # a glob's `*` stays within one folder, as Docker's does
    matched = [
        p
        for p in [context, *sorted(context.rglob("*"))]
        if (rel := p.relative_to(context).as_posix()).count("/") == depth
        and fnmatch.fnmatchcase(rel, pattern)
    ]
    if not matched:
        raise HarborTaskError(task, f"{where}: COPY source {pattern} is not in environment/")
    out: list[tuple[Path, str]] = []
    for path in matched:
        if path.is_dir():
            out += [(f, f.relative_to(path).as_posix()) for f in context_files(path)]
        elif path.is_file() and not path.is_symlink():
            out.append((path, path.name))
    return out


def under_workspace(path: str) -> bool:
    return path == WORKSPACE or path.startswith(WORKSPACE + "/")


def copy(
    task: str, where: str, context: Path, words: list[str], workdir: str, placed: dict[str, Path]
) -> None:
    """Place one COPY's files into `placed` (absolute path -> source file), as Docker would: into
    the destination folder when it ends in `/`, is a folder already, or takes several sources or a
    folder; else as the destination file."""
    *srcs, dest = words
    target = posixpath.normpath(posixpath.join(workdir, dest))
    found = [pair for s in srcs for pair in sources(task, where, context, s)]
    into_dir = (
        dest.endswith("/")
        or dest in (".", "./")
        or len(found) != 1
        or any(Path(context, s.lstrip("/")).is_dir() for s in srcs)
        or any(p.startswith(target + "/") for p in placed)
    )
    for file, rel in found:
        final = posixpath.join(target, rel) if into_dir else target
        if not under_workspace(final):
            raise HarborTaskError(task, f"{where}: COPY to {final} is outside the workspace {WORKSPACE}")
        placed[final] = file


def interpret(task: str, context: Path, dockerfile: Path) -> dict[str, Path]:
    """The workspace files a FROM/WORKDIR/COPY Dockerfile places (absolute path -> source file);
    HarborTaskError naming the first instruction the sandbox cannot provide."""
    workdir, placed, seen_from = "/", {}, False
    for number, line in logical_lines(dockerfile.read_text(encoding="utf-8", errors="replace")):
        keyword, _, rest = line.partition(" ")
        keyword, rest, where = keyword.upper(), rest.strip(), f"environment/Dockerfile line {number}"
        if keyword == "FROM":
            image = next((w for w in rest.split() if not w.startswith("--")), "")
            if seen_from:
                raise HarborTaskError(task, f"{where}: a second FROM needs a multi-stage build")
            if not is_plain_base(image):
                raise HarborTaskError(
                    task, f"{where}: FROM {image} needs that image; plain bases: {', '.join(PLAIN_BASES)}"
                )
            seen_from = True
        elif keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, rest.strip("\"'")))
        elif keyword == "COPY":
            copy(task, where, context, copy_args(task, where, rest), workdir, placed)
        else:
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise HarborTaskError(
                task, f"{where}: {shown} needs a built image; only FROM, WORKDIR and COPY are read"
            )
    if workdir != WORKSPACE:
        raise HarborTaskError(
            task, f"environment/Dockerfile: WORKDIR {workdir}: the sandbox's workspace is {WORKSPACE}"
        )
    return placed


def starting_files(task: str, environment: Path) -> dict[str, Path]:
    """The workspace's starting files (absolute path -> source file) of a task's environment/."""
    if not environment.is_dir():
        return {}
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (environment / compose).exists():
            raise HarborTaskError(
                task, f"needs services (environment/{compose}); the sandbox runs one workspace"
            )
    dockerfile = environment / "Dockerfile"
    if dockerfile.is_file():
        return interpret(task, environment, dockerfile)
    return {
        posixpath.join(WORKSPACE, p.relative_to(environment).as_posix()): p
        for p in context_files(environment)
    }
