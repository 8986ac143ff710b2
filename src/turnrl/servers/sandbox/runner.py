"""Execute one checked request in a fresh work dir under the host's isolation layers.

The life of a run: make a work dir (owned by the slot's uid) and write the code and files;
spawn; feed stdin and read stdout/stderr incrementally with a cap while waiting for the program
to exit or the wall-clock limit; kill the process group and sweep for escapees; read what is
left in the pipes; collect fetch_files; remove the work dir.

The run ends when the program's process exits, not when its pipes close: a daemon it left
behind may hold stdout open, and waiting for EOF would make every such run a timeout.

Nothing here raises for a misbehaving program: every outcome is a SandboxFusion response.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from turnrl.servers.sandbox import reaper
from turnrl.servers.sandbox.config import SandboxConfig
from turnrl.servers.sandbox.isolation import SETUP_EXIT, SETUP_FAILED, Isolation, Limits, cpu_seconds_for
from turnrl.servers.sandbox.schema import RunSpec, response, run_result

DRAIN_GRACE_S = 1.0  # after the kill, how long pipes may take to reach EOF
LAUNCHER_GRACE_S = 1.0  # how long a spared launcher or run reaper gets to finish on its own


@dataclass
class CappedOutput:
    """Bytes kept up to `cap`; everything past it is read (so the writer never blocks) and counted."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.kept)

    def text(self) -> str:
        # binary output must never break the JSON response
        return self.kept.decode("utf-8", errors="replace")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # real-time signals have no name of their own
        return f"signal {number}"


class RunProtocol(asyncio.SubprocessProtocol):
    """Collects a run's output as it arrives and tells apart the program's exit from EOF."""

    def __init__(self, out: CappedOutput, err: CappedOutput) -> None:
        loop = asyncio.get_running_loop()
        self.streams = {1: out, 2: err}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.eof: dict[int, asyncio.Future[None]] = {1: loop.create_future(), 2: loop.create_future()}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.streams[fd].add(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self.eof and not self.eof[fd].done():
            self.eof[fd].set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


@dataclass
class Spawned:
    transport: asyncio.SubprocessTransport
    protocol: RunProtocol

    @property
    def pid(self) -> int:
        return self.transport.get_pid()

    async def exit_within(self, seconds: float) -> bool:
        """Whether the program's process has exited, waiting at most `seconds` for it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.protocol.exited), seconds)
        return self.protocol.exited.done()


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
        self.active: dict[int, Spawned] = {}  # slot -> running program

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

    def _prepare(self, spec: RunSpec, slot: int) -> str:
        workdir = tempfile.mkdtemp(dir=self.work_root, prefix="run-")
        uid = self.iso.uid(slot)
        for rel, data in [*spec.files.items(), (spec.language.filename, spec.code)]:
            path = os.path.join(workdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        if uid is not None:
            for dirpath, dirnames, filenames in os.walk(workdir):
                for name in [*dirnames, *filenames]:
                    os.chown(os.path.join(dirpath, name), uid, uid)
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        return workdir

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

    def _kill_program(self, pid: int, slot: int) -> None:
        """Kill the program and everything it started, escapees included, but spare the process
        that reports its end.

        With a PID namespace, `pid` is the root-owned `unshare` launcher and its child is the
        namespace's init shell: the shell sees its program die and exits with its status, and the
        kernel then kills whatever is left in the namespace. (Killing the launcher first would
        orphan the namespace to the host's init.) With a run reaper, `pid` is the reaper: it
        kills the daemons re-parented to it, which no sweep here can find, and exits with the
        program's status.
        """
        iso, uid = self.iso, self.iso.uid(slot)
        inits = reaper.children_of(pid) if iso.pid_ns else []
        spare = frozenset({pid, *inits}) if iso.pid_ns else frozenset()
        if iso.cgroups is not None:  # exact: an unprivileged process cannot leave its cgroup
            iso.cgroups.kill(slot, spare)
        elif uid is not None:  # the launcher and the init shell are root, the program is not
            reaper.kill_until_gone(lambda: reaper.pids_with_real_uid({uid}))
        elif iso.pid_ns:  # orphans are re-parented to the init shell, so its children are all
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

    def _remove_strays(self, slot: int) -> None:
        """Without a private /tmp, files the slot's uid left in the shared temp dirs."""
        uid = self.iso.uid(slot)
        if uid is None or self.iso.mount_ns:
            return
        for top in ("/tmp", "/var/tmp", "/dev/shm"):
            with contextlib.suppress(OSError):
                for entry in os.scandir(top):
                    with contextlib.suppress(OSError):
                        if entry.stat(follow_symlinks=False).st_uid == uid:
                            if entry.is_dir(follow_symlinks=False):
                                shutil.rmtree(entry.path, ignore_errors=True)
                            else:
                                os.unlink(entry.path)

    async def _stop(self, run: Spawned, slot: int) -> None:
        await asyncio.to_thread(self._kill_program, run.pid, slot)
        if not await run.exit_within(LAUNCHER_GRACE_S) or not self.iso.pid_ns:
            # a session or group id stays taken while any process holds it, and the kernel hands
            # out pids cyclically, so these cannot hit an unrelated process
            await asyncio.to_thread(self._kill_leftovers, run.pid)
        await run.exit_within(LAUNCHER_GRACE_S)
        await asyncio.to_thread(self._remove_strays, slot)

    async def run(self, spec: RunSpec, slot: int) -> dict[str, Any]:
        try:
            workdir = await asyncio.to_thread(self._prepare, spec, slot)
        except OSError as err:
            return response("SandboxError", f"could not prepare the work dir: {err}", run_result("Error"))
        try:
            result, ran = await self._execute(spec, slot, workdir)
            if not ran:
                return result
            files, problems = await asyncio.to_thread(self._fetch, workdir, spec.fetch_files)
            result["files"] = files
            result["message"] = "; ".join([m for m in [result["message"], *problems] if m])
            return result
        finally:
            await asyncio.to_thread(shutil.rmtree, workdir, True)

    async def _execute(self, spec: RunSpec, slot: int, workdir: str) -> tuple[dict[str, Any], bool]:
        """The response and whether the program ran (False: the sandbox failed to run it)."""
        cfg, iso = self.cfg, self.iso
        program = [*spec.language.argv, spec.language.filename]
        if iso.cgroups is not None:
            with contextlib.suppress(OSError):  # a failed update keeps the previous, still finite, limit
                iso.cgroups.set_limits(slot, spec.memory_MB << 20, cfg.max_processes)
        out, err = CappedOutput(cfg.max_output), CappedOutput(cfg.max_output)
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: RunProtocol(out, err),
                *iso.argv(program, slot),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=iso.env(iso.work_path(workdir), [os.path.dirname(cfg.python)]),
                preexec_fn=iso.preexec(self._limits(spec), slot, cfg.tmpfs_MB),
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return response("SandboxError", f"could not start the program: {exc}", run_result("Error")), False
        spawned = Spawned(transport, protocol)
        self.active[slot] = spawned
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        if spec.stdin:
            stdin.write(spec.stdin)  # buffered by the transport; a program that never reads just exits
        stdin.close()  # after the buffer is flushed
        timed_out = False
        try:
            timed_out = not await spawned.exit_within(spec.run_timeout)
        finally:
            elapsed = time.monotonic() - start
            try:
                # runs even when the request is cancelled, so no run outlives its request
                await self._stop(spawned, slot)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*protocol.eof.values()), DRAIN_GRACE_S)
            finally:
                transport.close()
                self.active.pop(slot, None)
        return self._result(transport.get_returncode(), timed_out, elapsed, spec, out, err)

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
            code = 128 - code  # shell convention, as the namespace's init shell reports it
        if code == 128 + signal.SIGXCPU:
            timed_out = True
            notes.append("CPU time limit exceeded")
        if timed_out:
            notes.insert(0, f"run timed out after {spec.run_timeout:g}s")
            run = run_result("TimeLimitExceeded", elapsed, None, out.text(), stderr)
        else:
            run = run_result("Finished", elapsed, code, out.text(), stderr)
            if code is not None and code - 128 in signal.valid_signals():
                notes.append(f"exit status {code}: killed by {_signal_name(code - 128)}")
        for name, stream in (("stdout", out), ("stderr", err)):
            if stream.truncated:
                notes.append(f"{name} truncated to {len(stream.kept)} of {stream.total} bytes")
        status = "Success" if not timed_out and code == 0 else "Failed"
        return response(status, "; ".join(n for n in notes if n), run), True

    async def kill_all(self) -> None:
        for slot, spawned in list(self.active.items()):
            await self._stop(spawned, slot)
