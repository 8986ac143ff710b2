"""Harbor tasks through real sandbox sessions: the workspace made from a row, the reference solution
(`oracle`) scoring 1 and an untouched workspace 0, a verifier that hangs or fails silently scoring 0
with a reason; and every built-in task's oracle (about 10 s)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from turnrl.servers.sandbox.client import SandboxClient
from turnrl.servers.sandbox.process import SandboxProcess
from turnrl.tasks.harbor import HarborTask, TaskFile, builtin_tasks, oracle, rows, task_from_row, verify


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess(workers=4, queue=64) as proc:
        yield proc


async def play(proc: SandboxProcess, task: HarborTask, solve: bool):
    client = SandboxClient(str(proc.url), api_key=proc.api_key)
    async with client, client.session(files=task.workspace_files(), ttl_s=300) as session:
        return await (oracle(session, task) if solve else verify(session, task))


def test_a_row_becomes_a_workspace_the_oracle_solves_and_an_empty_attempt_fails(sandbox_process):
    row = rows("train", 0)[0]
    task = task_from_row(row)
    solved = asyncio.run(play(sandbox_process, task, solve=True))
    assert (solved.reward, solved.ok) == (1.0, True), solved.reason
    untouched = asyncio.run(play(sandbox_process, task, solve=False))
    assert (untouched.reward, untouched.ok) == (0.0, True), untouched.reason


def test_a_hanging_or_silent_verifier_scores_zero_with_a_reason(sandbox_process):
    hang = HarborTask("hangs", "", (), (TaskFile("/tests/test.sh", b"sleep 600\n"),), verifier_timeout_s=2.0)
    verdict = asyncio.run(play(sandbox_process, hang, solve=False))
    assert (verdict.reward, verdict.ok) == (0.0, False) and "ran past its timeout" in verdict.reason
    silent = HarborTask("silent", "", (), (TaskFile("/tests/test.sh", b"echo no >&2\nexit 4\n"),))
    verdict = asyncio.run(play(sandbox_process, silent, solve=False))
    assert verdict.reward == 0.0 and verdict.reason == "test.sh exited 4 and wrote no reward file ('no')"
    bad = HarborTask("bad", "", (), (TaskFile("/tests/test.sh", b"echo yes > /logs/verifier/reward.txt\n"),))
    verdict = asyncio.run(play(sandbox_process, bad, solve=False))
    assert not verdict.ok and verdict.reason == "harbor task 'bad': reward.txt is not a number: 'yes'"


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
def test_every_builtin_task_oracle_scores_1_in_the_sandbox(sandbox_process):
    async def every() -> list[tuple[str, float, str]]:
        async def one(task: HarborTask) -> tuple[str, float, str]:
            verdict = await play(sandbox_process, task, solve=True)
            return task.name, verdict.reward, verdict.reason

        return await asyncio.gather(*(one(t) for _, t in builtin_tasks()))

    wrong = [r for r in asyncio.run(every()) if r[1] != 1.0]
    assert not wrong, wrong
