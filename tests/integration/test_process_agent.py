"""An agent as a process, in any language (`rollout.agent.command`), end to end: real processes
(a Python script on the `openai` SDK, a shell script on `curl`, a Node.js script on the `openai`
npm package) talking over real HTTP to the gateway on loopback, the in-process `hf` engine over
tiny-random, and the failures a process can have, each one episode of a batch whose others go on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.agent_batches import chat_prompt, segments, unpadded
from turnrl.agent.functions.rollout import FunctionAgentRollout
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.trainer.stages import group_and_merge, split_generation_input

BUDGET = 64
PY = sys.executable

SDK_AGENT = """
import json, os, sys
from openai import OpenAI

row = json.load(sys.stdin)
assert json.load(open(os.environ["TURNRL_ROW_FILE"])) == row
client = OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
out = client.chat.completions.create(model=os.environ["TURNRL_MODEL"], messages=row["prompt"], max_tokens=6)
print("a log line")
print(json.dumps({"reward": 0.25 + row["index"], "chars": len(out.choices[0].message.content or "")}))
"""

CURL_AGENT = """#!/bin/sh
set -e
body='{"model": "'"$TURNRL_MODEL"'", "messages": [{"role": "user", "content": "Compute 12 * 34."}], "max_tokens": 6}'
curl -sf -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" \\
    -d "$body" "$OPENAI_BASE_URL/chat/completions" > "$TURNRL_EPISODE_DIR/reply.json"
[ "$1" = quiet ] || echo "answer: 408"
"""

NODE_AGENT = """
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const row = JSON.parse(readFileSync(0, "utf8"));  // the row, from stdin
const client = new OpenAI({ maxRetries: 0 });     // OPENAI_BASE_URL, OPENAI_API_KEY
const messages = [...row.prompt];
let out = await client.chat.completions.create({ model: process.env.TURNRL_MODEL, messages, max_tokens: 6 });
messages.push(out.choices[0].message, { role: "user", content: "Again." });
out = await client.chat.completions.create({ model: process.env.TURNRL_MODEL, messages, max_tokens: 6 });
console.log(JSON.stringify({ reward: 1, turns: 2 }));
"""

# one script, one behaviour per row (its extra_info's mode): calls the gateway with urllib
MODES_AGENT = """
import json, os, subprocess, sys, urllib.request

row = json.load(sys.stdin)
mode, pid_file = row["extra_info"]["mode"], row["extra_info"].get("pid_file")

def call():
    body = {"model": os.environ["TURNRL_MODEL"], "messages": row["prompt"], "max_tokens": 4}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
        {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()

def child():
    pid = subprocess.Popen(["sleep", "600"]).pid
    open(pid_file, "w").write(str(pid))

if mode != "no_call":
    call()
if mode == "exit":
    print("boom", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    child()
    subprocess.run(["sleep", "600"])
if mode == "flood":
    chunk = b"x" * (1 << 20)
    for _ in range(100):
        sys.stdout.buffer.write(chunk)
if mode == "orphan":  # a child left running after a good exit
    child()
print("reward: 1")
"""


def make(tiny, command: str, engine=None, **overrides) -> FunctionAgentRollout:
    model, tok = tiny
    cfg = {
        "rollout.agent.command": command,
        "rollout.agent.timeout_s": 30,
        "data.max_response_length": BUDGET,
    }
    cfg.update(overrides)
    config = load_config(None, [f"{k}={v}" for k, v in cfg.items()])
    return FunctionAgentRollout(engine or HFEngine(model, tok), tok, config, tok.pad_token_id)


def rows_batch(tok, extras: list[dict]) -> Batch:
    questions = [f"Compute 12 * 34 ({i})." for i in range(len(extras))]
    ids, mask = left_pad([chat_prompt(tok, q) for q in questions], tok.pad_token_id)
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [[{"role": "user", "content": q}] for q in questions],
            "data_source": ["agent/test"] * len(extras),
            "ground_truth": ["408"] * len(extras),
            "extra_info": extras,
            "index": list(range(len(extras))),
        },
    )


def run(rollout, tok, extras: list[dict], n: int = 1):
    rows = rows_batch(tok, extras)
    gen_batch = split_generation_input(rows, rows=True)
    out, metrics = rollout.generate(gen_batch, SamplingParams(max_new_tokens=BUDGET, n=n, seed=7))
    return group_and_merge(rows, out, n), metrics


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(0o755)
    return path


def exact_scorer(tmp_path: Path) -> str:
    path = tmp_path / "exact.py"
    path.write_text(
        "def compute_score(source, text, truth, extra_info=None):\n    return float(text.strip() == truth)\n"
    )
    return str(path)


class RecordingEngine(HFEngine):
    """The real engine, keeping every row it sampled: (context, ids)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: list[tuple[list[int], list[int]]] = []

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None, abort=None):
        out = super().generate(prompt_ids, params, max_new_tokens_per_row, abort=abort)
        for r, ids in enumerate(out.response_ids):
            self.rows.append((list(prompt_ids[r // params.n]), list(ids)))
        return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def gone_soon(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not alive(pid)


def test_python_sdk_agent_from_the_environment(tiny, tmp_path):
    agent = script(tmp_path, "agent.py", SDK_AGENT)
    with make(tiny, f"{PY} {agent}") as rollout:
        batch, metrics = run(rollout, tiny[1], [{}, {}], n=2)
    assert list(batch["agent_reward"]) == [0.25, 0.25, 1.25, 1.25], batch["agent_error"]
    assert list(batch["agent_error"]) == [""] * 4 and metrics["agent/turns/mean"] == 1
    assert "agent/fn/chars" in metrics and metrics["agent/errors/nonzero_exit"] == 0
    assert batch["response_mask"].sum(-1).min().item() > 0


def test_shell_agent_with_curl_is_scored_on_its_answer(tiny, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    _, tok = tiny
    agent = script(tmp_path, "agent.sh", CURL_AGENT)
    scorer = RuleReward(tok, exact_scorer(tmp_path), timeout_s=0, agent_on_error="fail")
    with make(tiny, str(agent)) as rollout:
        batch, metrics = run(rollout, tok, [{}], n=2)
    assert list(batch["agent_answer"]) == ["408", "408"] and list(batch["agent_reward"]) == [None, None]
    assert metrics["agent/turns/mean"] == 1
    scores, _ = scorer(batch)
    assert scores.sum(-1).tolist() == [1.0, 1.0]
    # without an `answer:` line, the scorer reads the last reply the gateway recorded
    with make(tiny, f"{agent} quiet") as rollout:
        batch, _ = run(rollout, tok, [{}], n=1)
    last = segments(batch, 0)[-1][1]
    assert batch["agent_answer"][0] == tok.decode(last, skip_special_tokens=True)


def test_test_command_decides_the_reward(tiny, tmp_path):
    _, tok = tiny
    agent = script(tmp_path, "agent.sh", CURL_AGENT)
    # the test reads what the agent left in the episode's folder; exit status 0 is 1.0
    test = script(
        tmp_path, "test.sh", '#!/bin/sh\ngrep -q chat.completion "$TURNRL_EPISODE_DIR/reply.json"\n'
    )
    with make(tiny, f"{agent} quiet", **{"rollout.agent.test_command": str(test)}) as rollout:
        batch, _ = run(rollout, tok, [{}], n=1)
    assert list(batch["agent_reward"]) == [1.0], batch["agent_error"]
    # a number written to TURNRL_REWARD_FILE is the reward
    test.write_text('#!/bin/sh\necho 0.75 > "$TURNRL_REWARD_FILE"\nexit 1\n')
    with make(tiny, f"{agent} quiet", **{"rollout.agent.test_command": str(test)}) as rollout:
        batch, _ = run(rollout, tok, [{}], n=1)
    assert list(batch["agent_reward"]) == [0.75]


@pytest.fixture(scope="session")
def node_openai(tmp_path_factory):
    """A folder with the `openai` npm package installed (once per session)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    folder = tmp_path_factory.mktemp("node_agent")
    try:
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", "openai"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install openai timed out (no network?)")
    if proc.returncode != 0:
        pytest.skip(f"npm install openai failed (no network?): {proc.stderr.strip()[-300:]}")
    return folder


def test_node_agent_on_the_openai_package_records_the_engines_tokens(tiny, node_openai):
    model, tok = tiny
    agent = node_openai / "agent.mjs"
    agent.write_text(NODE_AGENT)
    engine = RecordingEngine(model, tok)
    with make(tiny, f"node {agent}", engine) as rollout:
        batch, metrics = run(rollout, tok, [{}], n=1)
    assert list(batch["agent_reward"]) == [1.0], batch["agent_error"]
    assert metrics["agent/turns/mean"] == 2 and metrics["agent/template_drift"] == 0
    full, _, _ = unpadded(batch, 0)
    runs = segments(batch, 0)
    assert [kind for kind, _ in runs] == [1, 0, 1], runs
    pos = len(full) - sum(len(ids) for _, ids in runs)
    for kind, ids in runs:
        if kind == 1:  # the sampled ids verbatim, right after the exact context the engine was given
            assert (full[:pos], ids) in engine.rows, f"sampled ids at {pos} not found after their context"
        pos += len(ids)


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
def test_failures_are_counted_and_killed_while_the_batch_goes_on(tiny, tmp_path):
    _, tok = tiny
    agent = script(tmp_path, "modes.py", MODES_AGENT)
    modes = ["ok", "exit", "hang", "flood", "no_call", "orphan"]
    pid_files = {m: tmp_path / f"{m}.pid" for m in ("hang", "orphan")}
    extras = [{"mode": m, "pid_file": str(pid_files.get(m, ""))} for m in modes]
    start = time.monotonic()
    with make(tiny, f"{PY} {agent}", **{"rollout.agent.timeout_s": 12}) as rollout:
        batch, metrics = run(rollout, tok, extras)
    assert time.monotonic() - start < 40
    counts = {k.removeprefix("agent/errors/"): v for k, v in metrics.items() if k.startswith("agent/errors/")}
    assert counts == {
        "exception": 0,
        "timeout": 1,
        "bad_return": 0,
        "no_calls": 1,
        "prompt_too_long": 0,
        "nonzero_exit": 1,
        "output_limit": 1,
        "workspace": 0,
    }
    errors = dict(zip(modes, batch["agent_error"], strict=True))
    assert errors["ok"] == errors["orphan"] == ""
    assert errors["exit"] == f"agent {PY} {agent} exited with status 3: boom"
    assert "wrote more than 1048576 bytes to stdout" in errors["flood"]
    assert "did not return within rollout.agent.timeout_s=12s" in errors["hang"]
    assert "returned without a model call" in errors["no_call"]
    # the children went with their groups: the hung agent's at its timeout, the orphan's at its exit
    for mode, path in pid_files.items():
        assert gone_soon(int(path.read_text())), f"{mode}: its child outlived the episode"
    # the good episodes are trained on: their reward, their sampled tokens
    rewards = dict(zip(modes, batch["agent_reward"], strict=True))
    assert rewards["ok"] == rewards["orphan"] == 1.0
    masks = dict(zip(modes, batch["response_mask"].sum(-1).tolist(), strict=True))
    assert masks["ok"] > 0 and masks["no_call"] == 0
    scores, _ = RuleReward(tok, timeout_s=0, agent_on_error="zero")(batch)
    assert dict(zip(modes, scores.sum(-1).tolist(), strict=True)) == {
        "ok": 1.0,
        "exit": 0.0,
        "hang": 0.0,
        "flood": 0.0,
        "no_call": 0.0,
        "orphan": 1.0,
    }
    assert os.environ.get("TURNRL_MODEL") is None  # the episode's settings stay the episode's
