"""A Harbor task's reward: what its verifier reported (`reward_of`, pure) and the verifier run in a
sandbox session after the episode (`verify`); `oracle` plays the reference solution in the agent's
place.

The rules (`reward_of`), in order:
1. test.sh ran past the task's verifier timeout, or was killed: 0, with the reason;
2. it wrote /logs/verifier/reward.txt: that number (surrounding whitespace allowed);
3. else it wrote /logs/verifier/reward.json: a number, or an object's `reward` entry, or an object's
   only entry;
4. else its exit status: 0 -> 1.0, anything else -> 0.0.
A reward file that is not a finite number is a failed episode: reward 0, `ok` false, and a reason
naming the task.
"""

from __future__ import annotations

import asyncio
import json
import math
import shlex
from dataclasses import dataclass
from typing import Protocol

from turnrl.agent.harbor.spec import TESTS, VERIFIER_DIR, WORKSPACE, HarborTask

REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
SETUP_TIMEOUT_S = 30.0
"""Clearing /logs/verifier and /tests before the verifier: a few file operations."""
GRACE_S = 30.0
"""How long past a command's own timeout `verify` waits for the sandbox's answer before giving up."""


class Result(Protocol):
    return_code: int | None
    stdout: str
    stderr: str
    timed_out: bool


class Session(Protocol):
    """What `verify` needs of a sandbox session (the client's `SandboxSession` has it)."""

    async def run(self, command: str, timeout_s: float = 30.0) -> Result: ...

    async def read(self, path: str) -> bytes: ...

    async def write(self, path: str, data: bytes | str) -> None: ...


@dataclass(frozen=True)
class VerifierOutput:
    """What a verifier run left: its exit status, and the reward files' text when it wrote them."""

    exit_code: int | None
    timed_out: bool = False
    reward_txt: str | None = None
    reward_json: str | None = None
    stderr: str = ""


@dataclass(frozen=True)
class Verdict:
    reward: float
    reason: str
    ok: bool = True
    """False when the verifier did not report a reward it meant: a timeout, a kill, an unreadable
    reward file, or a sandbox that failed."""


def _short(text: str, most: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= most else text[: most - 3] + "...")


def number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def json_reward(text: str) -> float | None:
    """reward.json's reward: a bare number, `{"reward": x}`, or an object with one numeric entry."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict):
        data = data["reward"] if "reward" in data else next(iter(data.values())) if len(data) == 1 else None
    if isinstance(data, bool) or not isinstance(data, int | float):
        return None
    return float(data) if math.isfinite(data) else None


def reward_of(task: str, out: VerifierOutput, timeout_s: float | None = None) -> Verdict:
    """The reward of one verifier run of task `task` (the module docstring's rules)."""
    if out.timed_out:
        limit = f" of {timeout_s:g} s" if timeout_s is not None else ""
        return Verdict(0.0, f"harbor task '{task}': test.sh ran past its timeout{limit}", ok=False)
    if out.reward_txt is not None:
        value = number(out.reward_txt)
        if value is None:
            return Verdict(
                0.0, f"harbor task '{task}': reward.txt is not a number: {_short(out.reward_txt)}", False
            )
        return Verdict(value, f"reward.txt: {value:g}")
    if out.reward_json is not None:
        value = json_reward(out.reward_json)
        if value is None:
            return Verdict(
                0.0,
                f"harbor task '{task}': reward.json holds no single reward: {_short(out.reward_json)}",
                False,
            )
        return Verdict(value, f"reward.json: {value:g}")
    if out.exit_code is None:
        return Verdict(0.0, f"harbor task '{task}': test.sh was killed before it exited", ok=False)
    if out.exit_code == 0:
        return Verdict(1.0, "test.sh exited 0 and wrote no reward file")
    last = out.stderr.strip().splitlines()[-1:] or [""]
    tail = f" ({_short(last[0])})" if last[0] else ""
    return Verdict(0.0, f"test.sh exited {out.exit_code} and wrote no reward file{tail}")


async def read_text(session: Session, path: str) -> str | None:
    """A file's text, or None when it is absent (or the sandbox will not hand it over)."""
    try:
        data = await session.read(path)
    except Exception:  # a missing file is the sandbox's 404: the verifier wrote none
        return None
    return data.decode("utf-8", errors="replace")


async def run(session: Session, command: str, timeout_s: float) -> Result | None:
    """`command` in the session, None when the sandbox gives no answer within its timeout and a
    grace: the client's own HTTP limit should answer first; this bounds it regardless."""
    try:
        return await asyncio.wait_for(session.run(command, timeout_s=timeout_s), timeout_s + GRACE_S)
    except TimeoutError:
        return None


def verifier_command(task: HarborTask) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in task.verifier_env)
    return f"cd {WORKSPACE} && {'env ' + env + ' ' if env else ''}bash {TESTS}/test.sh"


async def place_tests(session: Session, task: HarborTask) -> str | None:
    """Empty /tests and /logs/verifier (the agent could have written a reward there), then write the
    task's tests; an error line when the sandbox refused."""
    prepared = await run(
        session,
        f"rm -rf {VERIFIER_DIR} && mkdir -p {VERIFIER_DIR} {TESTS} && find {TESTS} -mindepth 1 -delete",
        SETUP_TIMEOUT_S,
    )
    if prepared is None or prepared.return_code != 0:
        detail = "no answer" if prepared is None else _short(prepared.stderr or prepared.stdout)
        return f"harbor task '{task.name}': could not prepare {TESTS} and {VERIFIER_DIR}: {detail}"
    try:
        for f in task.tests:
            await session.write(f.path, f.content)
    except Exception as err:  # the sandbox's one-line refusal, kept as the reason
        return f"harbor task '{task.name}': could not place {TESTS}: {str(err).splitlines()[0] if str(err) else err!r}"
    return None


async def verify(session: Session, task: HarborTask) -> Verdict:
    """Copy the task's tests/ into /tests of `session`, run `bash /tests/test.sh` within the task's
    verifier timeout, read the reward file it wrote and return the reward with its reason. Never
    raises for what the test script does and never waits much past the timeout."""
    failed = await place_tests(session, task)
    if failed is not None:
        return Verdict(0.0, failed, ok=False)
    result = await run(session, verifier_command(task), task.verifier_timeout_s)
    if result is None:
        return reward_of(task.name, VerifierOutput(None, timed_out=True), task.verifier_timeout_s)
    out = VerifierOutput(
        exit_code=result.return_code,
        timed_out=bool(result.timed_out),
        reward_txt=await read_text(session, REWARD_TXT),
        reward_json=await read_text(session, REWARD_JSON),
        stderr=result.stderr,
    )
    return reward_of(task.name, out, task.verifier_timeout_s)


async def oracle(session: Session, task: HarborTask) -> Verdict:
    """The reference solution in the agent's place: solution/ written to /logs/solution, `bash
    solve.sh` run in the workspace within the agent timeout (capped by the verifier's, the longest
    command), then `verify`."""
    if task.solve_sh() is None:
        return Verdict(0.0, f"harbor task '{task.name}': no solution/solve.sh", ok=False)
    for f in task.solution:
        await session.write(f"/logs/solution/{f.path}", f.content)
    solved = await run(session, f"cd {WORKSPACE} && bash /logs/solution/solve.sh", task.verifier_timeout_s)
    if solved is None or solved.timed_out or solved.return_code != 0:
        detail = "no answer" if solved is None else f"exit {solved.return_code}: {_short(solved.stderr)}"
        return Verdict(0.0, f"harbor task '{task.name}': solve.sh failed ({detail})", ok=False)
    return await verify(session, task)
