"""Start-up probe: find the strongest isolation this host really supports.

Each candidate layer set is tried with a real trial run of the python interpreter (the same
command line, environment and preexec a request gets), strongest first, so what /health
reports is what was seen to work, not what ought to.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from turnrl.servers.sandbox import nsetup, reaper, rootfs, seccomp
from turnrl.servers.sandbox.cgroups import CgroupSlots
from turnrl.servers.sandbox.cleanup import remove_tree
from turnrl.servers.sandbox.config import UIDS_PER_SERVER, SandboxConfig
from turnrl.servers.sandbox.isolation import FALLBACK_NOTE, Isolation, Limits
from turnrl.servers.sandbox.nsetup import exposures

UID_STRIDE = UIDS_PER_SERVER  # uids reserved per server: one per worker slot and one per session
FALLBACK_UID_BASE = 50_000  # for hosts (user-namespaced containers) that map only 16-bit uids


def claim_uid_block(base: int, size: int) -> tuple[int, int]:
    """Claim `size` consecutive uids starting at base + k * UID_STRIDE for the first free k.

    The claim is an flock held for the server's lifetime, so two sandbox servers on one host
    never share uids (a shared uid would share the process budget and the kill sweep).
    Returns (first uid, lock fd)."""
    if size > UID_STRIDE:
        raise OSError(f"workers + sessions: at most {UID_STRIDE} with per-slot uids, got {size}")
    lock_dir = Path("/run/lock") if os.access("/run/lock", os.W_OK) else Path(tempfile.gettempdir())
    for k in range(256):
        start = base + k * UID_STRIDE
        fd = os.open(lock_dir / f"turnrl-sandbox-uids-{start}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        # a server that held this block and died may have left processes behind
        reaper.kill_until_gone(lambda s=start: reaper.pids_with_real_uid(range(s, s + size)))
        return start, fd
    raise OSError(f"no free uid block above {base}")


# what the trial program reports: its uid, cwd, sys.prefix (a venv seen as such) and seccomp mode
TRIAL_CODE = (
    "import json, os, sys\n"
    "status = '/proc/self/status'\n"
    "lines = open(status).read().splitlines() if os.path.exists(status) else []\n"
    "mode = [line.split(':')[1].strip() for line in lines if line.startswith('Seccomp:')]\n"
    "print(json.dumps([os.getuid(), os.getcwd(), sys.prefix, mode[0] if mode else None]))\n"
)


def _trial(iso: Isolation, cfg: SandboxConfig, work_root: str, prefix: str | None = None) -> str | None:
    """Run a tiny python program under `iso` (and a bash one under the rootfs layer); None if it
    worked as every layer in force says it should, else why not. `prefix`: the interpreter's
    sys.prefix on the host, which it must also see inside the rootfs (else its venv is lost)."""
    why, got = _spawn_trial(iso, cfg, work_root, [cfg.python, "-c", TRIAL_CODE])
    if why is not None:
        return why
    try:
        uid, cwd, seen_prefix, mode = json.loads(got)
    except ValueError:
        return f"trial program printed {got[-200:]!r}"
    want_uid = iso.uid(0) if iso.uid_base is not None else (0 if iso.user_ns else os.getuid())
    if uid != want_uid:
        return f"program ran as uid {uid}, expected {want_uid}"
    if iso.mount_ns and cwd != iso.work_path("/"):
        return f"work dir seen as {cwd}, expected {iso.work_path('/')}"
    if iso.root is not None and prefix is not None and seen_prefix != prefix:
        return f"the interpreter sees sys.prefix {seen_prefix!r} inside the root, {prefix!r} outside"
    if iso.seccomp is not None and mode != "2":
        return f"program runs with seccomp mode {mode!r}, expected 2 (filter)"
    bash = cfg.languages().get("bash")
    if iso.root is not None and bash is not None:
        why, got = _spawn_trial(iso, cfg, work_root, [*bash.argv, "-c", "echo $PWD"])
        if why is None and got.strip() != iso.work_path("/"):
            why = f"bash printed {got.strip()[-200:]!r}, expected {iso.work_path('/')}"
        return None if why is None else f"bash: {why}"
    return None


def _spawn_trial(
    iso: Isolation, cfg: SandboxConfig, work_root: str, program: list[str]
) -> tuple[str | None, str]:
    """(None, stdout) if `program` exited 0 under `iso`, else (why not, "")."""
    workdir = tempfile.mkdtemp(dir=work_root, prefix="probe-")
    try:
        uid = iso.uid(0)
        if uid is not None:
            os.chown(workdir, uid, uid)
        limits = Limits(cfg.default_memory_MB << 20, 10, cfg.max_file_size, cfg.max_open_files, 1 << 20)
        if uid is not None:
            limits.processes = cfg.max_processes
        if iso.cgroups is not None:
            iso.cgroups.set_limits(0, cfg.default_memory_MB << 20, cfg.max_processes)
        try:
            proc = subprocess.run(
                program,
                cwd=workdir,
                env=iso.env(iso.work_path(workdir), [os.path.dirname(cfg.python)]),
                preexec_fn=iso.preexec(limits, 0, cfg.tmpfs_MB),
                start_new_session=True,
                capture_output=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as err:
            return f"{type(err).__name__}: {err}", ""
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            return (lines[-1] if lines else f"exit status {proc.returncode}"), ""
        return None, proc.stdout.decode(errors="replace")
    finally:
        remove_tree(workdir)


PythonLayout = tuple[list[str], list[str]]
"""(prefixes, sys.path) of an interpreter: sys.prefix first, then base_prefix, exec_prefix,
base_exec_prefix."""


def _python_layout(python: str) -> PythonLayout:
    """The interpreter's own answer; empty lists when it does not give one (then its trial fails)."""
    code = (
        "import json, sys; print(json.dumps([[sys.prefix, sys.base_prefix, sys.exec_prefix, "
        "sys.base_exec_prefix], sys.path]))"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, timeout=20, check=True).stdout
        prefixes, path = json.loads(out)
        return list(prefixes), list(path)
    except (OSError, subprocess.SubprocessError, ValueError):
        return [], []


def _interpreter_paths(python: str, layout: PythonLayout) -> list[str]:
    """What the interpreter needs at start-up: itself, its prefixes and sys.path (a venv's
    site-packages and the source dirs of editable installs included)."""
    prefixes, path = layout
    return [python, os.path.dirname(os.path.realpath(python)), *prefixes, *path]


NS_SETS = [  # strongest first
    {"net_ns": True, "pid_ns": True, "mount_ns": True},
    {"net_ns": False, "pid_ns": True, "mount_ns": True},
    {"net_ns": True, "pid_ns": False, "mount_ns": True},
    {"net_ns": False, "pid_ns": False, "mount_ns": True},
    {"net_ns": True, "pid_ns": False, "mount_ns": False},
]
NO_NS = {"net_ns": False, "pid_ns": False, "mount_ns": False}


def _set(iso: Isolation, **layers: bool) -> None:
    for k, v in layers.items():
        setattr(iso, k, v)


def _label(uid: bool, ns: dict[str, bool]) -> str:
    parts = (["uid"] if uid else []) + [k[:-3] for k, v in ns.items() if v]
    return "+".join(parts) or "basic"


def _label_of(iso: Isolation) -> str:
    label = _label(iso.uid_base is not None, {k: getattr(iso, k) for k in NO_NS})
    return label + "+rootfs" * (iso.root is not None) + "+seccomp" * (iso.seccomp is not None)


def _probe_rootfs(
    iso: Isolation, cfg: SandboxConfig, work_root: str, layout: PythonLayout, fallbacks: list[str]
) -> None:
    """Switch the rootfs layer on if its trial run works; else say why."""
    if not cfg.rootfs:
        iso.notes.append("rootfs: disabled by --no-rootfs; programs can read the host's world-readable files")
        return
    if not iso.mount_ns:
        iso.notes.append(
            "rootfs: needs the mount namespace layer; programs can read the host's world-readable files"
        )
        return
    prefixes, sys_path = layout
    # the slots' uids, then the sessions' (sessions.SessionStore), so that names resolve for all
    uids = [] if iso.uid_base is None else [iso.uid_base + i for i in range(cfg.workers + cfg.max_sessions)]
    tools = [cfg.python, *(lang.argv[0] for lang in cfg.languages().values())]
    try:
        iso.root = rootfs.plan_root(prefixes, sys_path, [t for t in tools if t], uids)
        why = _trial(iso, cfg, work_root, prefixes[0] if prefixes else None)
    except OSError as err:
        why = f"plan: {err}"
    if why is not None:
        fallbacks.append(f"{_label_of(iso)}: {why}")
        iso.root = None


def _probe_seccomp(
    iso: Isolation, cfg: SandboxConfig, work_root: str, layout: PythonLayout, fallbacks: list[str]
) -> None:
    """Switch the seccomp layer on if its trial run sees the filter in force; else say why."""
    if not cfg.seccomp:
        iso.notes.append("seccomp: disabled by --no-seccomp; programs may make every system call")
        return
    arch = seccomp.arch_for(platform.machine())
    if arch is None or nsetup.LIBC is None:
        why = "libc not loadable" if arch is not None else f"no system call table for {platform.machine()!r}"
        iso.notes.append(f"seccomp: {why}; programs may make every system call")
        return
    iso.seccomp = seccomp.build_filter(arch)
    why = _trial(iso, cfg, work_root, layout[0][0] if layout[0] else None)
    if why is not None:
        fallbacks.append(f"{_label_of(iso)}: {why}")
        iso.seccomp = None


def _note_reaper(iso: Isolation) -> None:
    if iso.run_reaper:
        iso.notes.append(
            "process_group: no pid namespace, cgroup or slot uid here: a per-run reaper process "
            "catches daemons that leave the run's session"
        )


def probe_isolation(cfg: SandboxConfig, work_root: str) -> Isolation:
    """The strongest working Isolation for this host and config; `notes` say what is missing and why."""
    iso = Isolation(mode=cfg.isolation)
    if cfg.isolation == "basic":
        iso.notes.append("namespaces, rootfs, seccomp, uid drop and cgroups disabled by --isolation basic")
        _note_reaper(iso)
        return iso
    if not sys.platform.startswith("linux"):
        iso.notes.append(f"{sys.platform}: only the basic layers exist off Linux")
        return iso
    if nsetup.LIBC is None:
        iso.notes.append("libc not loadable: no namespaces, no parent-death signal")
    iso.pdeathsig = nsetup.LIBC is not None
    root = os.geteuid() == 0
    uid_base = _claim_uids(iso, cfg, root)
    layout = _expose_interpreters(iso, cfg, uid_drop=uid_base is not None)
    fallbacks = _probe_namespaces(iso, cfg, work_root, uid_base, root)
    _probe_rootfs(iso, cfg, work_root, layout, fallbacks)
    _probe_seccomp(iso, cfg, work_root, layout, fallbacks)
    _record_fallbacks(iso, fallbacks)
    _probe_cgroups(iso, cfg, work_root, root)
    _note_unbounded(iso, root)
    return iso


def _claim_uids(iso: Isolation, cfg: SandboxConfig, root: bool) -> int | None:
    """The first uid of this server's per-slot block (its lock fd kept in `iso`); None without one."""
    if not root:
        iso.notes.append(
            "unprivileged_uid: server is not root, runs keep its uid (start as root for this layer)"
        )
        return None
    try:
        uid_base, iso.uid_lock_fd = claim_uid_block(cfg.uid_base, cfg.workers + cfg.max_sessions)
    except OSError as err:
        iso.notes.append(f"unprivileged_uid: {err}")
        return None
    return uid_base


def _expose_interpreters(iso: Isolation, cfg: SandboxConfig, uid_drop: bool) -> PythonLayout:
    """Set `iso.expose`; returns the interpreter's layout, which the rootfs and seccomp trials need."""
    # what the private mounts would hide from the interpreters goes back in, read-only
    layout = _python_layout(cfg.python)
    needed = _interpreter_paths(cfg.python, layout) + [lang.argv[0] for lang in cfg.languages().values()]
    iso.expose = exposures(needed, uid_drop=uid_drop)
    return layout


def _candidates(uid_base: int | None) -> list[tuple[bool, dict[str, bool]]]:
    """(with slot uids, namespace set) pairs to try, strongest first; namespaces need libc."""
    candidates: list[tuple[bool, dict[str, bool]]] = []
    for with_uid in ([True] if uid_base is not None else []) + [False]:
        if nsetup.LIBC is not None:
            candidates += [(with_uid, ns) for ns in NS_SETS]
        candidates.append((with_uid, NO_NS))
    return candidates


def _probe_namespaces(
    iso: Isolation, cfg: SandboxConfig, work_root: str, uid_base: int | None, root: bool
) -> list[str]:
    """Leave `iso` at the first candidate whose trial works; returns why the stronger ones failed."""
    failures: dict[str, list[str]] = {}  # reason -> layer sets that failed for it
    for with_uid, ns in _candidates(uid_base):
        iso.uid_base = uid_base if with_uid else None
        _set(iso, user_ns=not root and any(ns.values()), **ns)
        why = _trial(iso, cfg, work_root)
        if why is None:
            break
        failures.setdefault(why, []).append(_label(with_uid, ns))
    return [f"{', '.join(labels)}: {why}" for why, labels in failures.items()]


def _record_fallbacks(iso: Isolation, fallbacks: list[str]) -> None:
    """Report the layer sets that failed; release the uid block if no working set uses it."""
    iso.fallbacks = fallbacks
    if fallbacks:
        iso.notes.append(f"{FALLBACK_NOTE}: " + "; ".join(fallbacks))
    if iso.uid_base is None and iso.uid_lock_fd is not None:
        os.close(iso.uid_lock_fd)
        iso.uid_lock_fd = None


def _probe_cgroups(iso: Isolation, cfg: SandboxConfig, work_root: str, root: bool) -> None:
    """Switch per-slot cgroups on if their trial run works (root only); else say why."""
    if root and not cfg.cgroup:
        iso.notes.append("cgroup: disabled by --no-cgroup; memory is capped per process only")
    elif root:
        try:
            iso.cgroups = CgroupSlots(2 * cfg.workers)  # two cells per slot
            why = _trial(iso, cfg, work_root)
            if why is not None:
                raise OSError(why)
        except OSError as err:
            iso.notes.append(f"cgroup: unavailable ({err}); memory is capped per process only")
            if iso.cgroups is not None:
                with contextlib.suppress(OSError):
                    iso.cgroups.close()
            iso.cgroups = None
    else:
        iso.notes.append("cgroup: needs root; memory is capped per process only")


def _note_unbounded(iso: Isolation, root: bool) -> None:
    """Say what the layers in force leave open: fork bombs, escaped daemons, the server's uid."""
    if iso.uid_base is None and iso.cgroups is None:
        iso.notes.append(
            "fork bombs: NOT bounded (RLIMIT_NPROC is not enforced for root)"
            if root
            else "fork bombs: bounded by RLIMIT_NPROC over all processes of the server's user"
        )
    _note_reaper(iso)
    if iso.uid_base is None and not iso.pid_ns:  # a user namespace maps runs onto the server's uid
        iso.notes.append("programs run as the server's uid and can signal it or read its /proc entries")
