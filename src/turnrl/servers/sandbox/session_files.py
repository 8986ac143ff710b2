"""A session's files on the host: where a file API path lands, reading and writing them without
ever following a link, and how much the tree holds.

A session root on the host (under the server's work root) holds:

    app/     the workspace: /app for commands (with the rootfs layer), their cwd and $HOME
    tests/   /tests (Harbor's verifier scripts go here)
    logs/    /logs, with logs/verifier and logs/agent made at creation
    tmp/     $TMPDIR where commands share the host's /tmp (no mount layer); unseen otherwise

The root itself belongs to the server (mode 0711: a command cannot rename or replace its dirs);
the four dirs belong to the session's uid (mode 0700). Commands run as that uid and may leave
anything below them: symlinks to host files, FIFOs, hard links, trees thousands of levels deep.
So every path is walked here one component at a time from a descriptor of the root, with
O_NOFOLLOW at each step: a symlink anywhere on the path is refused, never followed, and only
regular files are read or written. The usage walk (`measure`) holds one descriptor per level and
stops at the session's depth limit, so a deep tree cannot exhaust descriptors or recursion.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from dataclasses import dataclass

from turnrl.servers.sandbox.nsetup import SESSION_DIRS
from turnrl.servers.sandbox.schema import NAME_MAX, PATH_MAX, BadRequest, shown

HOST_DIRS = (*SESSION_DIRS, "tmp")
PREMADE = ("logs/verifier", "logs/agent")  # where Harbor's verifier and agents write their logs
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathRefused(BadRequest):
    """A file API path that leaves the session, or meets a link or something not a regular file."""

    default_status = 400


def api_parts(path: str, max_depth: int, host_root: str | None = None) -> tuple[str, ...]:
    """The components below the session root of a file API path: absolute under /app, /tests or
    /logs, or relative to /app (`host_root`: the session's host dir, whose app/tests/logs paths
    are accepted too, for servers where commands see those). Raises PathRefused (400)."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise PathRefused("path: must be a non-empty string without NUL bytes")
    if host_root is not None:
        for name in SESSION_DIRS:
            prefix = f"{host_root}/{name}"
            if path == prefix or path.startswith(prefix + "/"):
                path = "/" + name + path[len(prefix) :]
                break
    full = "/" + path.lstrip("/") if path.startswith("/") else "/app/" + path
    norm = posixpath.normpath(full)
    parts = tuple(p for p in norm.split("/") if p)
    if not parts or parts[0] not in SESSION_DIRS:
        raise PathRefused(
            f"path: {shown(path)} is outside the session (/app, /tests, /logs, or a path relative to /app)"
        )
    if len(parts) == 1:
        raise PathRefused(f"path: {shown(path)} is one of the session's directories, not a file in it")
    size = len(norm.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX or any(len(p.encode("utf-8", "surrogatepass")) > NAME_MAX for p in parts):
        raise PathRefused(f"path: too long ({size} bytes; at most {PATH_MAX}, and {NAME_MAX} per name)")
    if len(parts) - 1 > max_depth:
        raise PathRefused(f"path: {len(parts) - 1} levels deep; at most {max_depth} (session_max_depth)")
    return parts


def shown_parts(parts: tuple[str, ...]) -> str:
    return shown("/" + "/".join(parts))


def _refuse_link(dir_fd: int, name: str, parts: tuple[str, ...], err: OSError) -> PathRefused:
    """The refusal for `name` (in dir_fd) that could not be opened as asked."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode):
        why = f"{shown(name)} is a symbolic link; the file API never follows links"
    elif err.errno in (errno.ENOTDIR, errno.EISDIR):
        why = f"{shown(name)} is {'a directory' if stat.S_ISDIR(mode) else 'not a directory'}"
    else:
        why = f"{shown(name)}: {err.strerror}"
    return PathRefused(f"path: {shown_parts(parts)}: {why}")


def _parent_fd(root: str, parts: tuple[str, ...], create: bool, uid: int | None) -> int:
    """A descriptor of the directory holding parts[-1], walked from the root without following
    links; missing dirs are made (owned by `uid`) when `create`. FileNotFoundError if missing."""
    fd = os.open(root, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                if uid is not None:
                    os.chown(part, uid, uid, dir_fd=fd, follow_symlinks=False)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise _refuse_link(fd, part, parts, err) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_regular(info: os.stat_result, parts: tuple[str, ...], owner: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise PathRefused(f"path: {shown_parts(parts)} is not a regular file")
    if info.st_nlink > 1 and info.st_uid != owner:
        # a hard link to a file that is not the session's: never read or written through
        raise PathRefused(f"path: {shown_parts(parts)} is a hard link to a file the session does not own")


def read_file(root: str, parts: tuple[str, ...], cap: int, uid: int | None) -> bytes:
    """The file's bytes. PathRefused (400), BadRequest 404 when missing, 413 over `cap`."""
    try:
        dir_fd = _parent_fd(root, parts, False, uid)
    except FileNotFoundError:
        raise BadRequest(f"path: {shown_parts(parts)} does not exist", 404) from None
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise BadRequest(f"path: {shown_parts(parts)} does not exist", 404) from None
    except OSError as err:
        raise _refuse_link(dir_fd, parts[-1], parts, err) from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        _check_regular(info, parts, os.geteuid() if uid is None else uid)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        if info.st_size > cap:
            raise BadRequest(
                f"path: {shown_parts(parts)} is {info.st_size} bytes, over the read limit of {cap} bytes "
                "(the server's max_fetch); read it in parts with a command",
                413,
            )
        data = f.read(cap + 1)
    if len(data) > cap:
        raise BadRequest(f"path: {shown_parts(parts)} grew past the read limit of {cap} bytes", 413)
    return data


def write_file(root: str, parts: tuple[str, ...], data: bytes, uid: int | None) -> None:
    """Create or replace the file (and its missing dirs), owned by `uid`. PathRefused (400) for a
    link or something not a regular file in the way."""
    dir_fd = _parent_fd(root, parts, True, uid)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dir_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR, errno.ETXTBSY):
                raise _refuse_link(dir_fd, parts[-1], parts, err) from None
            raise
    finally:
        os.close(dir_fd)
    try:
        _check_regular(os.fstat(fd), parts, os.geteuid() if uid is None else uid)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "wb") as f:
        os.ftruncate(fd, 0)
        f.write(data)
        if uid is not None:
            os.fchown(fd, uid, uid)


def make_root(root: str, uid: int | None) -> None:
    """The dirs of a new session root (`root` exists, empty, the server's)."""
    os.chmod(root, 0o711)
    for name in (*HOST_DIRS, *PREMADE):
        path = os.path.join(root, name)
        os.mkdir(path, 0o700 if name in HOST_DIRS else 0o755)
        if uid is not None:
            os.chown(path, uid, uid)


@dataclass
class Usage:
    """What a session root holds: bytes on disk (as du counts them), entries, and why it is over
    a limit ("" when it is not)."""

    bytes: int = 0
    entries: int = 0
    over: str = ""


def measure(root: str, max_bytes: int, max_entries: int, max_depth: int) -> Usage:
    """Walk the session's dirs without following links. Stops as soon as a limit is passed: a
    runaway tree is not walked to its end."""
    usage = Usage()
    stack: list[tuple[int, list[str]]] = []
    try:
        top = os.open(root, DIR_FLAGS)
        stack.append((top, [n for n in HOST_DIRS if _is_dir(top, n)]))
        while stack:
            fd, pending = stack[-1]
            if not pending:
                os.close(stack.pop()[0])
                continue
            name = pending.pop()
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:  # gone meanwhile, or replaced by something else
                continue
            if len(stack) > max_depth + 1:  # the top's own dirs are level 0
                os.close(child)
                usage.over = f"directory tree deeper than {max_depth} levels (session_max_depth)"
                return usage
            stack.append((child, _scan(child, usage)))
            if usage.entries > max_entries:
                usage.over = f"{usage.entries} or more files and dirs, over the limit of {max_entries}"
                return usage
            if usage.bytes > max_bytes:
                usage.over = f"{usage.bytes} or more bytes on disk, over the quota of {max_bytes}"
                return usage
        return usage
    finally:
        for fd, _ in stack:
            with contextlib.suppress(OSError):
                os.close(fd)


def _is_dir(fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _scan(fd: int, usage: Usage) -> list[str]:
    """Count one directory's entries into `usage`; its subdirectories' names."""
    subdirs: list[str] = []
    with contextlib.suppress(OSError), os.scandir(fd) as entries:
        for entry in entries:
            usage.entries += 1
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                usage.bytes += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    subdirs.append(entry.name)
    return subdirs
