"""A Harbor verifier's reward: the pure rules (`reward_of`), `verify` against a scripted session
(tests placed, a reward the agent wrote cleared, a hang bounded), every built-in task's solve.sh
scoring 1 and its untouched workspace 0 in a plain temporary folder, and the demonstrations."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from turnrl.agent.harbor import local, reward
from turnrl.agent.harbor.demos import TOOLS, solved_files
from turnrl.tasks.harbor import (
    DemoError,
    HarborTask,
    TaskFile,
    VerifierOutput,
    builtin_tasks,
    demonstration,
    parse_solve,
    reward_of,
    verify,
)


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        (VerifierOutput(0, reward_txt="0.75\n"), (0.75, True, "reward.txt: 0.75")),
        (VerifierOutput(1, reward_txt="1"), (1.0, True, "reward.txt: 1")),  # the file wins over the status
        (VerifierOutput(0, reward_json='{"reward": 0.5, "tests": 3}'), (0.5, True, "reward.json: 0.5")),
        (VerifierOutput(0, reward_json='{"accuracy": 0.25}'), (0.25, True, "reward.json: 0.25")),
        (VerifierOutput(0, reward_json="2"), (2.0, True, "reward.json: 2")),
        (VerifierOutput(0), (1.0, True, "test.sh exited 0 and wrote no reward file")),
        (VerifierOutput(3, stderr="x\nAssertionError: no\n"), (0.0, True, "test.sh exited 3 and wrote no reward file ('AssertionError: no')")),
        (VerifierOutput(0, reward_txt="passed"), (0.0, False, "harbor task 'demo': reward.txt is not a number: 'passed'")),
        (VerifierOutput(0, reward_txt="nan"), (0.0, False, "harbor task 'demo': reward.txt is not a number: 'nan'")),
        (VerifierOutput(0, reward_json='{"a": 1, "b": 2}'), (0.0, False, "harbor task 'demo': reward.json holds no single reward")),
        (VerifierOutput(None, timed_out=True, reward_txt="1"), (0.0, False, "harbor task 'demo': test.sh ran past its timeout of 60 s")),
        (VerifierOutput(None), (0.0, False, "harbor task 'demo': test.sh was killed before it exited")),
    ],
)  # fmt: skip
def test_reward_rules(out, expected):
    verdict = reward_of("demo", out, 60.0)
    assert (verdict.reward, verdict.ok) == expected[:2]
    assert verdict.reason.startswith(expected[2]) and "\n" not in verdict.reason


@dataclass
class Ran:
    return_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class FakeSession:
    """A session whose files are a dict; `verifier` plays test.sh on them."""

    def __init__(self, verifier, files=None):
        self.files: dict[str, bytes] = dict(files or {})
        self.verifier, self.commands = verifier, []

    async def run(self, command: str, timeout_s: float = 30.0) -> Ran:
        self.commands.append((command, timeout_s))
        if command.startswith("rm -rf /logs/verifier"):
            self.files = {
                p: c for p, c in self.files.items() if not p.startswith(("/logs/verifier/", "/tests/"))
            }
            return Ran(0)
        return await self.verifier(self)

    async def read(self, path: str) -> bytes:
        if path not in self.files:
            raise RuntimeError(f"404: {path} not found")
        return self.files[path]

    async def write(self, path: str, data: bytes | str) -> None:
        self.files[path] = data.encode() if isinstance(data, str) else data


TASK = HarborTask(
    "demo", "Do it.", (), (TaskFile("/tests/test.sh", b"exit 0\n"), TaskFile("/tests/t.py", b"pass\n")),
    verifier_timeout_s=5.0, verifier_env=(("MODE", "strict run"),),
)  # fmt: skip


def test_verify_places_the_tests_clears_a_planted_reward_and_reads_the_new_one():
    async def writes_half(session):
        assert session.files["/tests/t.py"] == b"pass\n"  # placed before the verifier runs
        assert "/logs/verifier/reward.txt" not in session.files  # the agent's own reward is gone
        session.files["/logs/verifier/reward.txt"] = b"0.5\n"
        return Ran(1)

    session = FakeSession(writes_half, {"/logs/verifier/reward.txt": b"1", "/tests/old.py": b"stale"})
    verdict = asyncio.run(verify(session, TASK))
    assert (verdict.reward, verdict.ok, verdict.reason) == (0.5, True, "reward.txt: 0.5")
    assert "/tests/old.py" not in session.files
    assert session.commands[-1] == ("cd /app && env MODE='strict run' bash /tests/test.sh", 5.0)


def test_verify_of_a_silent_failure_or_a_hang_is_zero_with_a_reason(monkeypatch):
    async def fails(session):
        return Ran(2, stderr="boom")

    verdict = asyncio.run(verify(FakeSession(fails), TASK))
    assert (verdict.reward, verdict.ok) == (0.0, True) and "exited 2" in verdict.reason

    async def sandbox_says_timeout(session):
        return Ran(None, timed_out=True)

    verdict = asyncio.run(verify(FakeSession(sandbox_says_timeout), TASK))
    assert (verdict.reward, verdict.ok) == (0.0, False) and "ran past its timeout of 5 s" in verdict.reason

    async def never_answers(session):
        await asyncio.sleep(3600)

    monkeypatch.setattr(reward, "GRACE_S", 0.05)
    quick = HarborTask("stuck", "", (), TASK.tests, verifier_timeout_s=0.05)
    verdict = asyncio.run(asyncio.wait_for(verify(FakeSession(never_answers), quick), 5))
    assert (verdict.reward, verdict.ok) == (0.0, False) and "ran past its timeout" in verdict.reason


def test_every_builtin_task_scores_1_solved_and_0_untouched():
    tasks = [t for _, t in builtin_tasks()]

    def both(task):
        return task.name, local.run_local(task, solve=True), local.run_local(task, solve=False)

    with ThreadPoolExecutor(4) as pool:  # each run is two short subprocesses
        results = list(pool.map(both, tasks))
    wrong = [(name, s.reason, e.reason) for name, s, e in results if (s.reward, e.reward) != (1.0, 0.0)]
    assert not wrong, wrong


def test_a_demonstration_is_a_tool_call_episode_from_solve_sh():
    tasks = dict(builtin_tasks())
    prompt = [{"role": "user", "content": "fix it"}]
    patch = tasks["strings/slugify_fix"]
    messages = demonstration(patch, prompt, "OK\n")
    assert messages[0] == prompt[0] and messages[-1] == {
        "role": "assistant",
        "content": messages[-1]["content"],
    }
    calls = [m["tool_calls"][0] for m in messages if m.get("tool_calls")]
    names = [(c["function"]["name"], json.loads(c["function"]["arguments"]).get("command")) for c in calls]
    assert names == [("editor", "view"), ("editor", "str_replace"), ("bash", "python3 -m unittest -q")]
    replace = json.loads(calls[1]["function"]["arguments"])
    start = patch.workspace_files()["/app/textutils.py"].decode()
    assert replace["path"] == "/app/textutils.py" and start.count(replace["old_str"]) == 1
    answers = [m for m in messages if m["role"] == "tool"]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    assert "slugify" in answers[0]["content"] and answers[-1]["content"] == "OK"
    whole = demonstration(tasks["classes/tally_class"], prompt)  # a whole-file solution: create
    commands = [
        json.loads(m["tool_calls"][0]["function"]["arguments"])["command"]
        for m in whole
        if m.get("tool_calls")
    ]
    assert commands == ["view", "create"]  # no check output given: no check step
    assert {t["function"]["name"] for t in TOOLS} == {"bash", "editor"}


def test_applying_the_parsed_edits_is_what_solve_sh_does(tmp_path):
    for _, task in builtin_tasks():
        expected = solved_files(task)
        work, _, logs, solution = local.folders(task, tmp_path / task.name)
        assert local.bash(solution / "solve.sh", work, logs).returncode == 0
        for path, text in expected.items():
            assert (work / path.removeprefix("/app/")).read_text() == text, (task.name, path)


def test_a_solve_sh_outside_the_scripted_forms_is_refused():
    with pytest.raises(DemoError, match=r"line 2: 'pip install x' is neither a file write nor a patch"):
        parse_solve("t", "#!/bin/bash\npip install x\n")
    with pytest.raises(DemoError, match="no closing EOF"):
        parse_solve("t", "cat > a.py <<'EOF'\nx = 1\n")
    assert [e.path for e in parse_solve("t", "set -e\ncd /app\ncat > a.py <<'EOF'\nx\nEOF\n")] == [
        "/app/a.py"
    ]
