"""A minimal read-only root for each run, built in its mount namespace and entered with pivot_root.

What a program sees (read-only unless marked):

    /usr/bin /usr/lib /usr/lib64 ...  binds of the host's: bash, sh, coreutils, libc, the loader
    /bin /lib /lib64 ...              the host's symlinks (usr-merged hosts), or binds of its dirs
    <the interpreter>                 its prefixes (the venv, the pyenv or conda install) and the sys.path
                                      dirs under them (numpy and the rest), bound at their host paths
    /etc                              passwd, group, hosts, nsswitch.conf made up here (root, the run
                                      uids, nobody); the loader's ld.so.cache and the alternatives
                                      links (awk -> mawk) from the host
    /dev                              null zero full random urandom (the host's nodes, writable),
                                      fd/stdin/stdout/stderr links; /dev/shm a fresh tmpfs (writable)
    /proc                             see below
    /tmp /var/tmp                     fresh tmpfs (writable)
    /tmp/sandbox                      the run's work dir (writable): its cwd and HOME

Nothing else exists: not /home, /root (beyond an interpreter installed below it), /etc/shadow,
/run and the sockets in it, /sys, other runs' work dirs, or the checkout with the server's source.
sys.path entries outside the interpreter's prefixes are left out on purpose: they are editable
installs (turnrl itself) or the server's own PYTHONPATH, not the interpreter's libraries.

/proc: with a PID namespace, the namespace's init mounts a fresh proc over /proc (pidns.py). In a
user namespace the kernel allows that only while some proc mount is fully visible in the mount
namespace (fs/namespace.c, mount_too_revealing), and a process outside the new PID namespace may
not mount one itself; so the host's /proc is bound there and stays covered: only umount2, denied
by the seccomp layer and needing capabilities the uid layer drops, could uncover it. Without a PID
namespace the program sees the host's processes through it, as it would without this layer.
"""

from __future__ import annotations

import os
import platform
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from turnrl.servers.sandbox import nsetup, seccomp
from turnrl.servers.sandbox.nsetup import (
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    WORK_PATH,
    _check,
    _kept_flags,
    _mount,
    bind_work,
)

# the host paths bash, sh and every dynamically linked program need
SYSTEM_PATHS = (
    "/bin",
    "/usr/bin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libx32",
)
HOST_FILES = (
    "/etc/ld.so.cache",  # the loader finds libraries in ld.so.conf.d's dirs through it
    "/etc/alternatives",  # Debian's /usr/bin/awk, /usr/bin/editor ... are links through it
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEV_LINKS = (
    ("/dev/fd", "/proc/self/fd"),  # bash's process substitution opens /dev/fd/N
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
)
# prefixes too broad to bind whole (all of /usr holds far more than one interpreter): from these,
# only the sys.path entries below their library dirs go in
BROAD_PREFIXES = ("/", "/usr")
LIBRARY_DIRS = ("lib", "lib64", "local/lib")
# The new root is assembled on a tmpfs mounted over /tmp: the mount namespace's copy of /tmp is
# about to be hidden anyway, and it exists on every host.
STAGING = "/tmp"
NOBODY = 65534


@dataclass(frozen=True)
class RootPlan:
    """What goes into a run's root; the same for every run of a server (made by `plan_root`)."""

    binds: tuple[str, ...]  # host paths (symlink-free) bound read-only at the same place
    links: tuple[tuple[str, str], ...]  # (path, target): host symlinks on the way to a bind
    devices: tuple[str, ...]  # device nodes bound writable
    files: tuple[tuple[str, str], ...]  # (path, text) written into the root before it turns read-only
    pivot_root_nr: int  # glibc has no wrapper for pivot_root(2)


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def outermost(paths: Iterable[str]) -> list[str]:
    """`paths` without those inside another one (a parent sorts before its children)."""
    out: list[str] = []
    for path in sorted(set(paths)):
        if not any(under(path, kept) for kept in out):
            out.append(path)
    return out


def python_dirs(
    prefixes: list[str], sys_path: list[str], holds_distributions: Callable[[str], bool]
) -> list[str]:
    """The interpreter's part of the root: its prefixes, except one that is all of / or /usr; the
    absolute sys.path entries below a prefix (below a broad prefix's library dirs); and entries
    elsewhere that hold installed distributions (*.dist-info: a .pth pointing at another
    site-packages). What is left out is source: an editable checkout (turnrl's own among them,
    whose metadata sits in the venv, not beside the code) or the server's PYTHONPATH."""
    tops = list(dict.fromkeys(os.path.normpath(p) for p in prefixes if p))
    roots: list[str] = []
    for top in tops:
        roots += [os.path.join(top, lib) for lib in LIBRARY_DIRS] if top in BROAD_PREFIXES else [top]
    entries = [os.path.normpath(e) for e in sys_path if e and os.path.isabs(e)]
    wanted = [top for top in tops if top not in BROAD_PREFIXES]
    wanted += [e for e in entries if any(under(e, root) for root in roots) or holds_distributions(e)]
    return list(dict.fromkeys(wanted))


def resolve(path: str, readlink: Callable[[str], str | None]) -> tuple[str, list[tuple[str, str]]]:
    """Follow `path` component by component as the kernel does: (the symlink-free path, every
    symlink met on the way as (where, target)). The root recreates those links so that the
    interpreter is found by the name the server uses (a venv's bin/python is usually one)."""
    links: list[tuple[str, str]] = []
    parts = [p for p in path.split("/") if p]
    current = "/"
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        target = readlink(candidate)
        if target is None:
            current = candidate
            continue
        if len(links) >= 40:  # the kernel's own limit (MAXSYMLINKS)
            raise OSError(f"{path}: too many levels of symbolic links")
        links.append((candidate, target))
        parts = [p for p in target.split("/") if p] + parts
        if target.startswith("/"):
            current = "/"
    return current, links


def etc_files(uids: list[int]) -> tuple[tuple[str, str], ...]:
    """/etc of the root: only root, the runs' uids and nobody exist (getpwuid and `~` must work)."""
    users = [("root", 0)] + [(f"sandbox{i}", u) for i, u in enumerate(uids) if u not in (0, NOBODY)]
    users.append(("nobody", NOBODY))
    passwd = "".join(f"{name}:x:{uid}:{uid}::{WORK_PATH}:/bin/sh\n" for name, uid in users)
    group = "".join(f"{'nogroup' if uid == NOBODY else name}:x:{uid}:\n" for name, uid in users)
    return (
        ("/etc/passwd", passwd),
        ("/etc/group", group),
        ("/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n"),
        ("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"),  # no NIS or DNS look-ups
    )


def _host_readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # not a link, or not there
        return None


def _holds_distributions(path: str) -> bool:
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(path))
    except OSError:
        return False


def _is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def plan_root(prefixes: list[str], sys_path: list[str], executables: list[str], uids: list[int]) -> RootPlan:
    """The root for this host: the system paths, the interpreter and the `executables` (the
    languages' interpreters, wherever they live). Raises OSError naming what is missing."""
    arch = seccomp.arch_for(platform.machine())
    if arch is None:
        raise OSError(f"no system call table for {platform.machine()!r} (pivot_root)")
    pivot_root_nr = arch.number(seccomp.DENIED["pivot_root"])
    assert pivot_root_nr is not None
    wanted = [p for p in SYSTEM_PATHS if os.path.lexists(p)] + python_dirs(
        prefixes, sys_path, _holds_distributions
    )
    wanted += [p for p in [*executables, *HOST_FILES] if p and os.path.exists(p)]
    binds: list[str] = []
    links: dict[str, str] = {}
    for path in wanted:
        real, met = resolve(os.path.abspath(path), _host_readlink)
        if os.path.exists(real) and not under(real, WORK_PATH):
            binds.append(real)
            links.update(met)
    kept = outermost(binds)
    if not kept:
        raise OSError("nothing to bind: no system dirs or interpreter paths found")
    link_list = sorted((p, t) for p, t in links.items() if not any(under(p, b) for b in kept))
    devices = tuple(d for d in DEVICES if _is_char_device(d))
    return RootPlan(tuple(kept), tuple(link_list), devices, etc_files(uids), pivot_root_nr)


# ---- in the forked child: system calls only (see nsetup) ----


def _mountpoint(new: str, path: str, directory: bool) -> str:
    target = new + path
    if directory:
        os.makedirs(target, exist_ok=True)
    else:  # a file (the interpreter, a device node) is bound onto a file
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    return target


def _tmpfs(target: str, options: str) -> None:
    os.makedirs(target, exist_ok=True)
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options)


def enter(plan: RootPlan, tmpfs_opts: str, work_root: str | None = None) -> None:
    """Build the root on a tmpfs over STAGING and pivot into it. Runs in the child, in its new
    mount namespace with private propagation; its cwd is still the host-side work dir, unless the
    sandbox is prepared before its request (`work_root`: see nsetup.bind_work)."""
    assert nsetup.LIBC is not None
    try:
        _build(plan, tmpfs_opts, STAGING, nsetup.open_work(work_root))
    except OSError as err:  # the paths in it are the staging copies: say so
        raise OSError(err.errno, f"rootfs (assembled under {STAGING}): {err}") from err
    # pivot_root(".", ".") stacks the old root on top of the new one; detaching it leaves the
    # new root alone in the namespace (pivot_root(2), NOTES), with nothing of the host reachable
    os.chdir(STAGING)
    _check(nsetup.LIBC.syscall(plan.pivot_root_nr, b".", b"."), "pivot_root")
    _check(nsetup.LIBC.umount2(b".", MNT_DETACH), "umount2 old root")
    os.chdir(WORK_PATH if work_root is None else "/")


def _build(plan: RootPlan, tmpfs_opts: str, new: str, work_fd: int | None) -> None:
    # handles first: a source under /tmp (a venv in a CI clone) is hidden once `new` covers it
    sources = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in (*plan.binds, *plan.devices)}
    umask = os.umask(0o022)  # dirs made below must be traversable by the run's uid
    try:
        _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
        # the writable places first, so that a bind below them (a venv under /tmp) stays on top
        _tmpfs(new + "/tmp", tmpfs_opts)
        _tmpfs(new + "/var/tmp", tmpfs_opts)
        _tmpfs(new + "/dev/shm", tmpfs_opts)
        for path, target in plan.links:
            os.makedirs(os.path.dirname(new + path), exist_ok=True)
            os.symlink(target, new + path)
        for path in plan.binds:
            fd = sources[path]
            target = _mountpoint(new, path, stat.S_ISDIR(os.fstat(fd).st_mode))
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            remount = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | _kept_flags(fd)
            _mount(None, target, None, remount)
        for path in plan.devices:  # writable, and not nodev: these are the point
            _mount(f"/proc/self/fd/{sources[path]}", _mountpoint(new, path, False), None, MS_BIND)
        for path, target in DEV_LINKS:
            os.symlink(target, new + path)
        _mount("/proc", _mountpoint(new, "/proc", True), None, MS_BIND | MS_REC)
        bind_work(new, work_fd)
        for path, text in plan.files:
            fd = os.open(_mountpoint(new, path, False), os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
    finally:
        os.umask(umask)
        for fd in sources.values():
            os.close(fd)
    _mount(None, new, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
