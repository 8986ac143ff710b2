"""Execute one checked request in a fresh work dir under the host's isolation layers.

The life of a run: make a work dir (owned by the slot's uid) and write the code and files;
spawn; feed stdin and read stdout/stderr incrementally with a cap while waiting for the program
to exit or the wall-clock limit; kill the process group and sweep for escapees; read what is
left in the pipes; collect fetch_files; remove the work dir.

The work dir is removed on every way out: an answer, a timeout, a request whose files cannot be
written (a 4xx naming the file), a failure of the sandbox, and the request's cancellation when its
client goes away. Steps that cannot be cut short are waited for first, even when cancelled
(`_ride_out`): a worker thread still writing the files, a program being handed to its sandbox.

The run ends when the program's process exits, not when its pipes close: a daemon it left
behind may hold stdout open, and waiting for EOF would make every such run a timeout.

Nothing here raises for a misbehaving program: every outcome is a SandboxFusion response.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import os
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from turnrl.servers.sandbox import reaper, zygote_client
from turnrl.servers.sandbox.cleanup import remove_tree
from turnrl.servers.sandbox.config import SandboxConfig
from turnrl.servers.sandbox.isolation import (
    SETUP_EXIT,
    SETUP_FAILED,
    Isolation,
    Limits,
    cell_of,
    cpu_seconds_for,
)
from turnrl.servers.sandbox.launch import RunRequest
from turnrl.servers.sandbox.schema import BadRequest, RunSpec, response, run_result, shown
from turnrl.servers.sandbox.spawn import CappedOutput, RunProtocol, Spawned, spawn_by_zygote, spawn_forked

__all__ = ["CappedOutput", "Runner", "Target"]

DRAIN_GRACE_S = 1.0  # after the kill, how long pipes may take to reach EOF
INLINE_BYTES = 64 << 10  # a request's files up to this size are written without a worker thread
VALID_SIGNALS = frozenset(int(s) for s in signal.valid_signals())
LAUNCHER_GRACE_S = 1.0  # how long a spared launcher or run reaper gets to finish on its own
# a file of the request that cannot be written for these reasons is the request's fault (one entry
# in the way of another, a name the file system refuses): a 4xx, not a sandbox failure
REQUEST_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.EINVAL})

T = TypeVar("T")


async def _ride_out(task: asyncio.Future[Any]) -> bool:
    """Wait until `task` is done even if the caller is cancelled meanwhile; whether it was.
    `asyncio.wait` never cancels what it waits for, so the task always runs to its end."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


async def _in_thread_to_the_end(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread, waited for to its end: a thread cannot be stopped, and the
    caller's clean-up (removing the work dir) must not race it. A cancellation is raised after."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    if await _ride_out(task):
        if not task.cancelled():
            task.exception()  # looked at: its outcome no longer matters, the cancellation wins
        raise asyncio.CancelledError
    return task.result()


@dataclass
class Target:
    """What to start and where: a /run_code program in its work dir, or a session's command."""

    argv: list[str]
    env: dict[str, str]
    workdir: str  # on the host: the run's work dir, or the session's root
    uid: int | None = None  # the session's uid, instead of the slot's (with the uid layer)
    session: bool = False

    def cwd(self, mount_ns: bool) -> str:
        """The host dir a server-forked program starts in (the mount layer moves it from there)."""
        return os.path.join(self.workdir, "app") if self.session and not mount_ns else self.workdir


Watch = Callable[[], Awaitable[str]]
"""Returns (a reason) when a running program must be stopped early: a session over its quota."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # real-time signals have no name of their own
        return f"signal {number}"


def _user_tasks(uid: int) -> int:
    """Threads currently held by `uid` (what RLIMIT_NPROC counts)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            owner = None
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        owner = int(line.split()[1])
                    elif line.startswith(b"Threads:") and owner == uid:
                        total += int(line.split()[1])
                        break
    return total


class Runner:
    def __init__(self, cfg: SandboxConfig, iso: Isolation, work_root: str) -> None:
        self.cfg, self.iso, self.work_root = cfg, iso, work_root
        # slot -> running program, its cell, what it runs
        self.active: dict[int, tuple[Spawned, int, Target]] = {}
        self.halves = [0] * cfg.workers  # which of its two cgroup cells a slot's next run uses
        self.zygote: zygote_client.ZygoteClient | None = None
        self.spawner_note = ""  # why runs are forked by the server, if they are

    async def start(self) -> None:
        """Start the zygote (on the event loop's thread), unless disabled or impossible here."""
        why = zygote_client.supported() if self.cfg.zygote else "disabled by --no-zygote"
        if why is None:
            client = zygote_client.ZygoteClient(self.iso, self.cfg.workers, self.cfg.tmpfs_MB, self.work_root)
            try:
                client.start()
                await client.wait_ready()
                self.zygote = client
            except (OSError, zygote_client.ZygoteDied) as err:
                client.close()
                why = f"did not start ({err})"
        if why is not None:
            self.spawner_note = f"zygote: {why}; each run is forked from the server itself (slower)"

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()

    def _limits(self, spec: RunSpec) -> Limits:
        processes = self.cfg.max_processes
        if self.iso.uid_base is None:
            # RLIMIT_NPROC counts every process of the uid, the server's own included
            processes += _user_tasks(os.getuid()) + int(self.iso.run_reaper)  # the reaper is one more
        return Limits(
            address_space=spec.memory_MB << 20,
            cpu_seconds=cpu_seconds_for(spec.run_timeout),
            file_size=self.cfg.max_file_size,
            open_files=self.cfg.max_open_files,
            processes=processes,
        )

    def _prepare(self, spec: RunSpec, slot: int, workdir: str) -> None:
        """Write the code and files into `workdir` and give it to the slot's uid. A file the request
        itself makes unwritable raises BadRequest naming it; other failures raise OSError."""
        uid = self.iso.uid(slot)
        for rel, data in [*spec.files.items(), (spec.language.filename, spec.code)]:
            path = os.path.join(workdir, rel)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
            except OSError as err:
                if err.errno not in REQUEST_ERRNOS:
                    raise
                raise BadRequest(
                    f"files[{shown(rel)}]: cannot be written in the work dir ({err.strerror}); "
                    "another entry of files is in its way, or the file system refuses its name"
                ) from None
        if uid is not None:
            for dirpath, dirnames, filenames in os.walk(workdir):
                for name in [*dirnames, *filenames]:
                    os.chown(os.path.join(dirpath, name), uid, uid)
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)

    def _fetch(self, workdir: str, paths: list[str]) -> tuple[dict[str, str], list[str]]:
        """Read requested files without following links out of the work dir: the program is
        dead by now, but it may have left a symlink to a host file or a FIFO behind."""
        files: dict[str, str] = {}
        problems: list[str] = []
        budget = self.cfg.max_fetch
        root = os.path.realpath(workdir)
        for rel in paths:
            full = os.path.join(root, rel)
            if os.path.realpath(os.path.dirname(full)) != os.path.dirname(full):
                problems.append(f"fetch_files: {rel!r} is behind a symlink; not returned")
                continue
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as err:
                problems.append(f"fetch_files: {rel!r} not returned ({err.strerror})")
                continue
            with os.fdopen(fd, "rb") as f:
                info = os.fstat(f.fileno())
                if not stat.S_ISREG(info.st_mode):
                    problems.append(f"fetch_files: {rel!r} is not a regular file")
                    continue
                if info.st_size > budget:
                    problems.append(f"fetch_files: {rel!r} exceeds the remaining {budget} bytes")
                    continue
                data = f.read(budget + 1)[:budget]
            budget -= len(data)
            files[rel] = base64.b64encode(data).decode("ascii")
        return files, problems

    def _kill_program(self, run: Spawned, uid: int | None, cell: int) -> None:
        """Kill the program and everything it started, escapees included, but spare the process
        that reports its end.

        With a PID namespace, `run.pid` is the launcher and its child is the namespace's init:
        init sees its program die, reports its status and exits, and the kernel then kills
        whatever is left in the namespace. Both run as root, not as the slot's uid; init waits in
        the run's cgroup (`run.spare`) when a zygote prepared it, the launcher never does. (Killing
        the launcher first would orphan the namespace to the host's init.) With a run reaper,
        `run.pid` is the reaper: it kills the daemons re-parented to it, which no sweep here can
        find, and exits with the program's status.
        """
        iso, pid = self.iso, run.pid
        if iso.cgroups is not None:  # exact: an unprivileged process cannot leave its cgroup
            iso.cgroups.kill(cell, run.spare)
        elif uid is not None:  # the launcher and init are root, the program is not
            reaper.kill_until_gone(lambda: reaper.pids_with_real_uid({uid}))
        elif iso.pid_ns:  # orphans are re-parented to init, so its children are all
            inits = list(run.spare) or reaper.children_of(pid)
            reaper.kill_until_gone(lambda: [c for i in inits for c in reaper.children_of(i)])
        elif iso.run_reaper:  # its session, and its children: the program and what it adopted
            reaper.kill_until_gone(lambda: reaper.session_and_children(pid))
        else:  # weakest net: the run's session (a setsid escapee is not caught)
            reaper.kill_until_gone(lambda: reaper.pids_in_session(pid))

    def _kill_leftovers(self, pid: int) -> None:
        """After the launcher or reaper is gone (or would not go): the last, coarse nets."""
        reaper.kill_group(pid)
        if self.iso.run_reaper:  # the reaper itself, if it would not go
            reaper.kill_until_gone(lambda: reaper.pids_in_session(pid))

    def _remove_strays(self, uid: int | None) -> None:
        """Without a private /tmp, files the run's uid left in the shared temp dirs."""
        if uid is None or self.iso.mount_ns:
            return
        for top in ("/tmp", "/var/tmp", "/dev/shm"):
            with contextlib.suppress(OSError):
                for entry in os.scandir(top):
                    with contextlib.suppress(OSError):
                        if entry.stat(follow_symlinks=False).st_uid == uid:
                            if entry.is_dir(follow_symlinks=False):
                                remove_tree(entry.path)
                            else:
                                os.unlink(entry.path)

    def _cell_is_empty(self, run: Spawned, cell: int) -> bool:
        """With a cgroup, whether nothing of the run is left in its cell: the usual case once
        the program has exited in a PID namespace, told without a worker thread."""
        cgroups = self.iso.cgroups
        return cgroups is not None and not cgroups.pids(cell) - run.spare

    def _uid_of(self, slot: int, target: Target | None) -> int | None:
        """The uid the run executes as: its session's, else its slot's (None without the layer)."""
        slot_uid = self.iso.uid(slot)
        return (
            target.uid if slot_uid is not None and target is not None and target.uid is not None else slot_uid
        )

    async def _stop(self, run: Spawned, slot: int, cell: int, target: Target | None = None) -> None:
        uid = self._uid_of(slot, target)
        if not self._cell_is_empty(run, cell):
            await asyncio.to_thread(self._kill_program, run, uid, cell)
        if not await run.exit_within(LAUNCHER_GRACE_S) or not self.iso.pid_ns:
            # a session or group id stays taken while any process holds it, and the kernel hands
            # out pids cyclically, so these cannot hit an unrelated process
            await asyncio.to_thread(self._kill_leftovers, run.pid)
        await run.exit_within(LAUNCHER_GRACE_S)
        if uid is not None and not self.iso.mount_ns:
            await asyncio.to_thread(self._remove_strays, uid)

    async def run(self, spec: RunSpec, slot: int) -> dict[str, Any]:
        """The run's answer; BadRequest when the request's own files cannot be written. Cancelled,
        it kills the program and removes the work dir before the cancellation goes on."""
        try:
            workdir = tempfile.mkdtemp(dir=self.work_root, prefix="run-")
        except OSError as err:
            return response("SandboxError", f"could not make the work dir: {err}", run_result("Error"))
        try:  # from here on every way out, a cancellation included, removes the work dir
            try:
                if len(spec.code) + sum(len(data) for data in spec.files.values()) <= INLINE_BYTES:
                    self._prepare(spec, slot, workdir)  # a few small writes: a thread costs more
                else:
                    await _in_thread_to_the_end(self._prepare, spec, slot, workdir)
            except OSError as err:
                return response("SandboxError", f"could not prepare the work dir: {err}", run_result("Error"))
            result, ran = await self._execute(spec, slot, self._program(spec, workdir))
            if not ran:
                return result
            files: dict[str, str] = {}
            problems: list[str] = []
            if spec.fetch_files:
                files, problems = await _in_thread_to_the_end(self._fetch, workdir, spec.fetch_files)
            result["files"] = files
            result["message"] = "; ".join([m for m in [result["message"], *problems] if m])
            return result
        finally:
            await _in_thread_to_the_end(remove_tree, workdir)

    def _program(self, spec: RunSpec, workdir: str) -> Target:
        """A /run_code program: its file in its work dir."""
        argv = [*spec.language.argv, spec.language.filename]
        env = self.iso.env(self.iso.work_path(workdir), [os.path.dirname(self.cfg.python)])
        return Target(argv, env, workdir)

    async def run_command(
        self, spec: RunSpec, slot: int, target: Target, watch: Watch | None = None
    ) -> tuple[dict[str, Any], str]:
        """A session's command (`target`) in the slot: the response, as /run_code's, and why
        `watch` stopped it ("" if it did not). Cancelled, it kills the command first."""
        result, _ = await self._execute(spec, slot, target, watch)
        return result, result.pop("stopped", "")

    async def _spawn(self, spec: RunSpec, slot: int, target: Target, protocol: RunProtocol) -> Spawned:
        cfg, iso = self.cfg, self.iso
        limits = self._limits(spec)
        uid = target.uid if iso.uid(slot) is not None else None
        if self.zygote is not None:
            request = RunRequest(target.argv, target.env, target.workdir, limits.pairs(), uid, target.session)
            return await spawn_by_zygote(self.zygote, slot, self.halves[slot], request, spec.stdin, protocol)
        preexec = iso.preexec(limits, slot, cfg.tmpfs_MB, uid, target.session)
        cwd = target.cwd(iso.mount_ns)
        return await spawn_forked(target.argv, target.env, cwd, preexec, spec.stdin, protocol)

    async def _wait(self, spawned: Spawned, timeout: float, watch: Watch | None) -> tuple[bool, str]:
        """Until the program exits, `timeout` passes or `watch` says stop: (timed out, why stopped)."""
        if watch is None:
            return not await spawned.exit_within(timeout), ""
        exited = asyncio.ensure_future(spawned.exit_within(timeout))
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({exited, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (exited, watcher):
                task.cancel()
        if exited.done() and not exited.cancelled():
            return not exited.result(), ""
        return False, watcher.result()

    async def _execute(
        self, spec: RunSpec, slot: int, target: Target, watch: Watch | None = None
    ) -> tuple[dict[str, Any], bool]:
        """The response and whether the program ran (False: the sandbox failed to run it)."""
        cfg, iso = self.cfg, self.iso
        cell = cell_of(slot, self.halves[slot])
        if iso.cgroups is not None:
            with contextlib.suppress(OSError):  # a failed update keeps the previous, still finite, limit
                iso.cgroups.set_limits(cell, spec.memory_MB << 20, cfg.max_processes)
        out, err = CappedOutput(cfg.max_output), CappedOutput(cfg.max_output)
        protocol = RunProtocol(out, err)
        start = time.monotonic()
        # a program being handed over is seen through even if the request is cancelled meanwhile:
        # cut short, it would start unwatched, in a slot the next request is given
        spawning = asyncio.ensure_future(self._spawn(spec, slot, target, protocol))
        cancelled = await _ride_out(spawning)
        if self.zygote is not None:  # the slot's next run: the other cell, prepared meanwhile
            self.halves[slot] ^= 1
        try:
            spawned = spawning.result()
        except (OSError, subprocess.SubprocessError, zygote_client.ZygoteDied) as exc:
            if cancelled:
                raise asyncio.CancelledError from None
            return response("SandboxError", f"could not start the program: {exc}", run_result("Error")), False
        self.active[slot] = (spawned, cell, target)
        timed_out, stopped = False, ""
        try:
            if cancelled:
                raise asyncio.CancelledError  # stopped below, like any run whose request is cancelled
            timed_out, stopped = await self._wait(spawned, spec.run_timeout, watch)
        finally:
            elapsed = time.monotonic() - start
            try:
                # runs even when the request is cancelled, so no run outlives its request
                await self._stop(spawned, slot, cell, target)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*protocol.eof.values()), DRAIN_GRACE_S)
            finally:
                spawned.close()
                self.active.pop(slot, None)
        if spawned.lost is not None:
            run = run_result("Error", elapsed, None, out.text(), err.text())
            return response("SandboxError", spawned.lost, run), False
        result, ran = self._result(spawned.returncode(), timed_out, elapsed, spec, out, err)
        if stopped:
            result["stopped"] = stopped
        return result, ran

    def _result(
        self,
        code: int | None,
        timed_out: bool,
        elapsed: float,
        spec: RunSpec,
        out: CappedOutput,
        err: CappedOutput,
    ) -> tuple[dict[str, Any], bool]:
        stderr = err.text()
        if code == SETUP_EXIT and stderr.startswith(SETUP_FAILED):
            return response("SandboxError", stderr.strip(), run_result("Error", elapsed, code)), False
        notes = []
        if code is not None and code < 0:
            code = 128 - code  # shell convention, as the namespace's init reports it
        if code == 128 + signal.SIGXCPU:
            timed_out = True
            notes.append("CPU time limit exceeded")
        if timed_out:
            notes.insert(0, f"run timed out after {spec.run_timeout:g}s")
            run = run_result("TimeLimitExceeded", elapsed, None, out.text(), stderr)
        else:
            run = run_result("Finished", elapsed, code, out.text(), stderr)
            if code is not None and code - 128 in VALID_SIGNALS:
                notes.append(f"exit status {code}: killed by {_signal_name(code - 128)}")
        for name, stream in (("stdout", out), ("stderr", err)):
            if stream.truncated:
                notes.append(f"{name} truncated to {len(stream.kept)} of {stream.total} bytes")
        status = "Success" if not timed_out and code == 0 else "Failed"
        return response(status, "; ".join(n for n in notes if n), run), True

    async def kill_all(self) -> None:
        for slot, (spawned, cell, target) in list(self.active.items()):
            await self._stop(spawned, slot, cell, target)
