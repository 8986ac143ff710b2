"""Namespace and mount set-up done with raw system calls in the forked child, before exec.

Doing this with `unshare`/`mount` binaries costs a dozen fork+exec round trips per run
(about 50 ms on a small machine); the same work as system calls takes about a millisecond,
most of it creating the network namespace. Everything here runs in the child between fork and exec, so it only makes
system calls and touches no lock the server's other threads might hold.

The mount layout a program sees without the rootfs layer (with it: rootfs.py, entered from here):
    /tmp, /var/tmp, /dev/shm   fresh tmpfs of its own (host temp files invisible, nothing left behind)
    /tmp/sandbox               its work dir (a bind of the host-side work dir; also its cwd and HOME)
    <interpreter paths>        the interpreter, its prefixes and sys.path, bound read-only where the
                               layout above would hide them: under a temp dir (a venv or checkout in
                               /tmp) they are bound into the fresh tmpfs at the same path; under a
                               directory other users cannot enter (e.g. /root/.pyenv, with the uid
                               layer) onto an empty tmpfs covering that directory
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Callable

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

WORK_PATH = "/tmp/sandbox"
# Where a sandbox made ready before its request (the zygote's) holds the server's whole work root,
# until `take_work_dir` binds the run's own dir at WORK_PATH and removes this, before any of the
# program's code runs.
STAGE_PATH = "/tmp/.turnrl-runs"
TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
MNT_DETACH = 2  # include/linux/mount.h (umount2 flags)


def _load_libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _load_libc()


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int) -> None:
    assert LIBC is not None
    _check(LIBC.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def fork() -> int:
    """libc's fork, not os.fork: in a child between fork and exec (of a multi-threaded server) no
    interpreter fork hooks or warnings may run. 0 in the child, the child's pid in the parent."""
    assert LIBC is not None
    pid = LIBC.fork()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fork: {os.strerror(err)}")
    return int(pid)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    assert LIBC is not None
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(LIBC.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def blocked_ancestor(path: str) -> str | None:
    """The first directory on `path` that users other than its owner cannot enter, if any."""
    current = "/"
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


Exposure = tuple[str, str | None]
"""(path, cover): bind `path` read-only at the same place; cover is the directory to hide under an
empty tmpfs first, or None when a private temp dir's fresh tmpfs already hides the host's copy."""


def exposures(paths: list[str], uid_drop: bool) -> list[Exposure]:
    """What the mount namespace must bind back so that the interpreter still starts.

    A path under /tmp, /var/tmp or /dev/shm (a venv or checkout there: CI clones anywhere) would
    vanish under the run's private tmpfs. With `uid_drop`, a path below a directory other users
    cannot enter (e.g. /root/.pyenv) would be unreachable for the slot's uid. Both the path as given
    and its resolved form count: the program is exec'd by the first, symlinks lead to the second.
    Only the outermost path of a nested set is kept."""
    found: dict[str, str | None] = {}
    for given in paths:
        if not given or not os.path.exists(given):
            continue
        for path in dict.fromkeys([os.path.abspath(given), os.path.realpath(given)]):
            temp = next((d for d in TEMP_DIRS if _under(path, d)), None)
            if temp is not None:
                # the temp dir itself cannot come back without undoing its privacy
                if path != temp and not _under(path, WORK_PATH):
                    found[path] = None
            elif uid_drop:
                blocked = blocked_ancestor(path)
                if blocked is not None and blocked != path:
                    found[path] = blocked
    out: list[Exposure] = []
    for path in sorted(found):
        if not any(_under(path, kept) for kept, _ in out):
            out.append((path, found[path]))
    return out


def _kept_flags(fd: int) -> int:
    # inside a user namespace a bind may not drop noexec from the mount it copies (EPERM);
    # the atime mode is kept by the kernel when the remount names none
    return MS_NOEXEC if os.fstatvfs(fd).f_flag & os.ST_NOEXEC else 0


def open_work(work_root: str | None) -> int | None:
    """A handle on the work root for `bind_work`, taken before tmpfs covers /tmp (where it lives)."""
    return None if work_root is None else os.open(work_root, os.O_PATH | os.O_CLOEXEC)


def bind_work(new_root: str, work_root_fd: int | None) -> None:
    """Bind the cwd (the host-side work dir) at new_root + WORK_PATH; or, for a sandbox prepared
    before its request, the whole work root at new_root + STAGE_PATH, with an empty WORK_PATH to
    bind the run's dir on later. new_root + /tmp must be the sandbox's fresh tmpfs."""
    work = new_root + WORK_PATH
    os.mkdir(work)
    if work_root_fd is None:
        _mount(".", work, None, MS_BIND | MS_REC)  # "." is still the (now hidden) host work dir
        return
    os.mkdir(new_root + STAGE_PATH, 0o700)
    _mount(f"/proc/self/fd/{work_root_fd}", new_root + STAGE_PATH, None, MS_BIND | MS_REC)
    os.close(work_root_fd)


def take_work_dir(run_dir: str, session: bool = False, rootfs: bool = False) -> None:
    """In a prepared sandbox, as root: the run's own dir at WORK_PATH (a session root's dirs at
    their places, `bind_session`), the rest of the work root (other runs' and sessions' dirs)
    unmounted, and the cwd there."""
    assert LIBC is not None
    source = os.path.join(STAGE_PATH, os.path.basename(run_dir))
    if session:
        bind_session(source, rootfs)
    else:
        _mount(source, WORK_PATH, None, MS_BIND | MS_REC)
    _check(LIBC.umount2(STAGE_PATH.encode(), MNT_DETACH), f"umount2 {STAGE_PATH}")
    os.rmdir(STAGE_PATH)
    if not session:
        os.chdir(WORK_PATH)


SESSION_DIRS = ("app", "tests", "logs")
"""A session root's dirs that commands see: at /app (the workspace), /tests and /logs with the
rootfs layer; under WORK_PATH without it (the host's / is no place to make mount points)."""


def session_paths(rootfs: bool) -> dict[str, str]:
    """Where a command sees each of SESSION_DIRS, when the mount layer is on."""
    if rootfs:
        return {name: "/" + name for name in SESSION_DIRS}
    return {name: f"{WORK_PATH}/{name}" for name in SESSION_DIRS}


def bind_session(source: str, rootfs: bool) -> None:
    """Bind the session root at `source` for its command, and enter its workspace. With the
    rootfs layer the read-only root is made writable for the three mount points only."""
    if not rootfs:
        if source != WORK_PATH:
            _mount(source, WORK_PATH, None, MS_BIND | MS_REC)
        os.chdir(f"{WORK_PATH}/app")
        return
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    umask = os.umask(0o022)
    try:
        for name in SESSION_DIRS:
            os.mkdir("/" + name)
    finally:
        os.umask(umask)
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for name in SESSION_DIRS:
        _mount(os.path.join(source, name), "/" + name, None, MS_BIND | MS_REC)
    os.chdir("/app")


def enter_session_direct(rootfs: bool) -> None:
    """A session's command forked by the server (no zygote): its root is at WORK_PATH (`bind_work`
    bound the cwd there); with the rootfs layer its dirs move to /app, /tests, /logs."""
    assert LIBC is not None
    bind_session(WORK_PATH, rootfs)
    if rootfs:
        _check(LIBC.umount2(WORK_PATH.encode(), MNT_DETACH), f"umount2 {WORK_PATH}")


def namespace_setup(
    user: bool,
    net: bool,
    mount: bool,
    tmpfs_MB: int,
    expose: list[Exposure],
    enter_root: Callable[[str, int | None], None] | None = None,
    work_root: str | None = None,
) -> Callable[[], None]:
    """A function for the child: enter new user/net/mount namespaces and lay out the mounts, or,
    with `enter_root` (rootfs.py), build a minimal root and pivot into it; `expose` is then unused.

    Without `work_root`, its cwd must already be the host-side work dir (Popen changes directory
    before preexec), which ends up at WORK_PATH and as the cwd. With it (a sandbox prepared before
    its request), the work root is staged instead (`bind_work`) and the cwd is /."""
    flags = (CLONE_NEWUSER if user else 0) | (CLONE_NEWNET if net else 0) | (CLONE_NEWNS if mount else 0)
    outer_uid, outer_gid = os.getuid(), os.getgid()
    tmpfs_opts = f"size={tmpfs_MB}m,mode=1777"
    covers = list(dict.fromkeys(cover for _, cover in expose if cover is not None))

    def setup() -> None:
        if not flags:
            return
        assert LIBC is not None
        _check(LIBC.unshare(flags), "unshare")
        if user:  # become root of the new user namespace, mapped onto the server's own uid
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"0 {outer_uid} 1")
            _write("/proc/self/gid_map", f"0 {outer_gid} 1")
        if not mount:
            return
        # keep every mount below private, or a host with shared propagation would see them
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        if enter_root is not None:
            enter_root(tmpfs_opts, work_root)
            return
        # handles on what must stay reachable once tmpfs covers it or its parents
        fds = [os.open(path, os.O_PATH) for path, _ in expose]
        work_fd = open_work(work_root)
        for d in TEMP_DIRS:
            if os.path.isdir(d):
                _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts)
        bind_work("", work_fd)
        for blocked in covers:
            _mount("tmpfs", blocked, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
        umask = os.umask(0o022)  # mount points made below must be traversable by the slot's uid
        for fd, (path, _) in zip(fds, expose, strict=True):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            else:  # a single file (the interpreter itself) needs a file to be bound onto
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            remount = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | _kept_flags(fd)
            _mount(None, path, None, remount)
            os.close(fd)
        os.umask(umask)
        os.chdir(WORK_PATH if work_root is None else "/")

    return setup
