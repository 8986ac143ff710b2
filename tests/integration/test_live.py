"""`turnrl live serve`: the policy served to clients it did not start, their sessions recorded,
rewards that arrive later, training while serving, a crash, a resume and a rollback.

Real processes throughout: the console script on tiny-random, the `openai` and `anthropic` SDKs as
clients (whole and streamed), httpx for the reward routes, SIGKILL for the crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.cli import console_script, one_line_error

ALICE, BOB, OPS = "alice-key-0123456789", "bob-key-0123456789ab", "ops-key-0123456789ab"
QUESTION = [{"role": "user", "content": "What is 2+3?"}]


def write_keys(tmp_path: Path) -> Path:
    keys = tmp_path / "keys.json"
    clients = [
        {"name": "alice", "key": ALICE},
        {"name": "bob", "key": BOB},
        {"name": "ops", "key": OPS, "admin": True},
    ]
    keys.write_text(json.dumps({"clients": clients}))
    return keys


def overrides(tmp_path: Path, steps: int, *extra: str) -> list[str]:
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    return [
        "model.path=tiny-random",
        "data.task=calculator",
        "data.task_args.n_train=4",
        "data.task_args.n_val=2",
        "data.train_batch_size=1",
        "data.val_batch_size=2",
        "data.max_response_length=32",
        "rollout.n=2",
        "actor.ppo_mini_batch_size=1",
        f"rollout.agent.chat_template={template}",
        f"live.keys_file={write_keys(tmp_path)}",
        "live.group_size=2",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
        *extra,
    ]


class Server:
    """`turnrl live serve` in a process of its own; `url` once it serves."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
        self.proc = subprocess.Popen(
            [console_script(), "live", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("serving at "), line + self.proc.stderr.read()[-3000:]  # type: ignore[union-attr]
        self.url = line.split()[2]

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/status", headers=auth(OPS)).json()

    def wait(self, timeout: float = 120) -> str:
        """Its exit (0) and stderr."""
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err[-3000:]
        return err


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat_session(url: str, sid: str, key: str = ALICE) -> tuple[list[int], list[int]]:
    """Two calls, the second streamed, as an OpenAI SDK app makes them; the versions the server named
    in the header and in the body."""
    client = openai.OpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="policy", messages=QUESTION, max_tokens=6)
    first = raw.parse()
    headers = [int(raw.headers["x-turnrl-policy-version"])]
    bodies = [first.model_extra["policy_version"]]
    follow = [*QUESTION, {"role": "assistant", "content": first.choices[0].message.content}]
    follow.append({"role": "user", "content": "Are you sure?"})
    with client.chat.completions.with_streaming_response.create(
        model="policy", messages=follow, max_tokens=6, stream=True
    ) as streamed:
        headers.append(int(streamed.headers["x-turnrl-policy-version"]))
        chunks = list(streamed.parse())
    assert chunks and chunks[-1].choices[0].finish_reason in ("stop", "length")
    bodies.append(next(c.model_extra["policy_version"] for c in chunks if "policy_version" in c.model_extra))
    return headers, bodies


def post(url: str, path: str, key: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(
        f"{url}{path}", headers=auth(key) | {"content-type": "application/json"}, content=content
    )


def metrics(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "run" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in rows if "live/sessions" in r]


def events(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "run" / "live" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_every_route_serves_records_rewards_drops_and_trains(tmp_path):
    scorer = tmp_path / "scorer.py"  # the server's own scoring of sessions of the task "scored"
    scorer.write_text(
        "def score(messages, task):\n"
        "    if task != 'scored':\n        return None\n"
        "    return 1.0 if messages[-1]['role'] == 'assistant' and messages[0]['content'] == 'What is 2+3?' else 0.0\n"
    )
    args = [
        "live.session_idle_s=1",
        "live.reward_window_s=3",
        "live.learn=false",
        f"live.score_fn={scorer}:score",
    ]
    server = Server(overrides(tmp_path, 2, *args))
    url = server.url
    scored = openai.OpenAI(
        base_url=f"{url}/sessions/sc/v1",
        api_key=BOB,
        max_retries=0,
        default_headers={"X-Turnrl-Task": "scored"},
    )
    scored.chat.completions.create(model="policy", messages=QUESTION, max_tokens=4)
    assert post(url, "/sessions/sc/close", BOB, {}).status_code == 200
    already = post(url, "/sessions/sc/reward", BOB, {"reward": 0})
    assert already.status_code == 409 and "already has a reward" in already.text  # the server's own: 1.0
    versions: list[int] = []
    for i in range(4):  # alice: four sessions from the same prompt, two groups of two
        headers, bodies = chat_session(url, f"a{i}")
        assert headers == bodies
        versions += bodies
        closed = post(url, f"/sessions/a{i}/close", ALICE, {}).json()
        assert closed == {"id": f"a{i}", "calls": 2, "state": "ended"}
        taken = post(url, f"/sessions/a{i}/reward", ALICE, {"reward": float(i % 2)})
        assert taken.status_code == 200, taken.text
    models = openai.OpenAI(base_url=f"{url}/sessions/a0/v1", api_key=ALICE, max_retries=0).models.list()
    assert [m.id for m in models.data] == ["policy"]
    # bob: an Anthropic-style agent, streamed, that never closes its session nor rewards it
    bob = anthropic.Anthropic(base_url=f"{url}/sessions/b0", api_key=BOB, max_retries=0)
    with bob.messages.stream(model="policy", max_tokens=6, messages=QUESTION) as stream:
        text = "".join(stream.text_stream)
        assert stream.get_final_message().content[0].text == text
    # the Responses API, and a reward for one call of a session still open
    responses = openai.OpenAI(base_url=f"{url}/sessions/a-resp/v1", api_key=ALICE, max_retries=0)
    answer = responses.responses.create(model="policy", input="What is 2+3?", max_output_tokens=6)
    assert answer.model_extra["policy_version"] >= 0
    assert post(url, "/sessions/a-resp/reward", ALICE, {"reward": 0.5, "call": 0}).status_code == 200
    assert post(url, "/sessions/a-resp/reward", ALICE, {"reward": 0.5, "call": 3}).status_code == 422

    refusals = {
        "another client's session": (post(url, "/sessions/a0/reward", BOB, {"reward": 1}), 404),
        "reward twice": (post(url, "/sessions/a1/reward", ALICE, {"reward": 1}), 409),
        "NaN": (post(url, "/sessions/a-resp/reward", ALICE, '{"reward": NaN}'), 422),
        "a string": (post(url, "/sessions/a-resp/reward", ALICE, {"reward": "1"}), 422),
        "an unknown key": (post(url, "/sessions/a-resp/reward", ALICE, {"reward": 1, "why": 2}), 422),
        "an unknown session": (post(url, "/sessions/nope/reward", ALICE, {"reward": 1}), 404),
        "no key": (httpx.get(f"{url}/status"), 401),
        "a wrong key": (httpx.get(f"{url}/status", headers=auth("x" * 20)), 401),
        "not an admin": (post(url, "/admin/learning", ALICE, {"enabled": False}), 403),
        "a closed session's call": (
            post(url, "/sessions/a0/v1/chat/completions", ALICE, {"model": "policy", "messages": QUESTION}),
            409,
        ),
        "another client's id": (
            post(url, "/sessions/a-resp/v1/chat/completions", BOB, {"model": "policy", "messages": QUESTION}),
            409,
        ),
        "an id too long": (
            post(
                url,
                f"/sessions/{'x' * 129}/v1/chat/completions",
                BOB,
                {"model": "policy", "messages": QUESTION},
            ),
            400,
        ),
    }
    for what, (response, status) in refusals.items():
        assert response.status_code == status, (what, response.text)
        message = response.json()["error"]["message"]
        assert "\n" not in message and message, what
    assert "in use by another client" in refusals["another client's id"][0].json()["error"]["message"]

    # a preference between two more sessions: a group of its own (left for later)
    for sid in ("p0", "p1"):
        chat_session(url, sid)
        post(url, f"/sessions/{sid}/close", ALICE, {})
    assert post(url, "/preferences", ALICE, {"chosen": "p0", "rejected": "p1"}).status_code == 200
    assert post(url, "/preferences", ALICE, {"chosen": "p0", "rejected": "p0"}).status_code == 422

    time.sleep(6)  # bob's session goes idle (1 s) and then past its reward window (3 s) unrewarded
    status = server.status()
    counts = status["counts"]
    assert counts["closed/idle"] >= 1 and counts["dropped/no_reward"] >= 1, status
    late = post(url, "/sessions/b0/reward", BOB, {"reward": 1})
    assert late.status_code in (409, 410), late.text  # dropped: a late reward is refused, not trained
    # learning was off from the start (live.learn=false): nothing trained while the clients came;
    # the admin switches it on, and the waiting groups train
    assert server.status()["learning"] is False and metrics(tmp_path) == []
    assert post(url, "/admin/learning", OPS, {"enabled": True}).json() == {"learning": True}
    server.wait()

    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["live/groups"] == 1 and r["live/sessions"] == 2 for r in rows)
    assert rows[0]["live/policy_version"] == 0 and rows[1]["live/policy_version"] == 1
    assert "actor/pg_loss" in rows[0] and rows[0]["critic/score/mean"] == 0.5
    trained = [sid for e in events(tmp_path) if e["kind"] == "trained" for sid in e["ids"]]
    assert len(trained) == len(set(trained))  # none twice
    assert min(versions) == 0


def reward_sessions(server: Server, ids: list[str]) -> None:
    for i, sid in enumerate(ids):
        chat_session(server.url, sid)
        post(server.url, f"/sessions/{sid}/close", ALICE, {})
        assert post(server.url, f"/sessions/{sid}/reward", ALICE, {"reward": float(i % 2)}).status_code == 200


@pytest.mark.slow  # 27 s: the store's marks and rollback are checked by default in tests/unit/test_live_store.py
def test_a_crash_loses_no_rewarded_session_and_a_rollback_undoes_steps(tmp_path, cli):
    # a crash (SIGKILL) with rewarded sessions not yet trained: a restart trains each of them once
    server = Server(overrides(tmp_path, 3))
    reward_sessions(server, ["c0", "c1"])
    deadline = time.monotonic() + 90
    while server.status()["counts"].get("trained", 0) < 2:  # step 1 is checkpointed
        assert time.monotonic() < deadline and server.proc.poll() is None
        time.sleep(0.3)
    reward_sessions(server, ["c2", "c3", "c4", "c5"])
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    server = Server(overrides(tmp_path, 3))
    assert server.status()["policy_version"] >= 1
    server.wait()
    marks: dict[str, set[int]] = {}
    for e in events(tmp_path):
        for sid in e.get("ids", []) if e["kind"] == "trained" else []:
            marks.setdefault(sid, set()).add(e["step"])
    # every session trained, each by one step: a step lost in the crash is trained again as that step
    assert sorted(marks) == [f"c{i}" for i in range(6)] and all(len(v) == 1 for v in marks.values()), marks
    assert sorted(step for v in marks.values() for step in v) == [1, 1, 2, 2, 3, 3]
    assert [r["step"] for r in metrics(tmp_path)] == [1, 2, 3]

    # a rollback to step 1: the next start serves step 1's policy; steps 2 and 3's sessions stay untrained
    back = cli("live", "rollback", str(tmp_path / "run"), "1")
    assert back.returncode == 0 and "rolled back to step 1" in back.stdout, back.stderr
    assert one_line_error(cli("live", "rollback", str(tmp_path / "run"), "7"), "live").endswith("has steps 1")
    server = Server(overrides(tmp_path, 2))
    status = server.status()
    assert status["policy_version"] == 1 and status["counts"]["dropped/rolled_back"] == 4, status
    reused = post(
        server.url, "/sessions/c3/v1/chat/completions", ALICE, {"model": "policy", "messages": QUESTION}
    )
    assert reused.status_code == 409 and "already used" in reused.text
    server.proc.send_signal(signal.SIGTERM)
    server.wait()


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (None, "live.keys_file: file not found"),
        ("{", "not readable JSON"),
        ('{"clients": [{"name": "a", "key": "short"}]}', "clients[0] (a): key must be printable ASCII"),
    ],
)
def test_a_bad_keys_file_is_one_line_before_the_model_loads(tmp_path, cli, content, line):
    args = overrides(tmp_path, 1)
    keys = tmp_path / "keys.json"
    if content is None:
        keys.unlink()
    else:
        keys.write_text(content)
    error = one_line_error(cli("live", "serve", *args), "live")
    assert line in error and not (tmp_path / "run").exists(), error
