"""The calculator agent written three ways (recipes/agents): calculator_openai.py (chat completions,
a function), calculator_anthropic.py (the `anthropic` SDK's Messages API, a process) and
calculator_node.mjs (the `openai` npm package's Responses API, a process).

What is checked: the Node agent's own tool and reward agree with the Python agent's on the same
expressions and answers, and the Anthropic agent's are the Python agent's; one episode of each,
through the real gateway over tiny-random with a scripted model (a calculator call with the
question's numbers, then the product), reads the same first prompt, makes the call, runs the tool and
earns the reward, with no fork; the benchmark's `--help` names the agents.
"""

from __future__ import annotations

import copy
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_batches import chat_prompt
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.functions.rollout import FunctionAgentRollout
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tasks import calculator
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.trainer.stages import group_and_merge, split_generation_input

ROOT = Path(__file__).parents[2]
AGENTS = ROOT / "src" / "turnrl" / "recipes" / "agents"
TEMPLATE = ROOT / "examples" / "templates" / "chatml_tools.jinja"
BENCHMARK = ROOT / "benchmarks" / "calculator_agent.py"
EXPRESSIONS = [
    "4821 * 739", "(12 + 3) * 4", "7 / 2", "8 / 2", "-(3) * -2", "1_000 * 2", "2.5 * 4", "10 - 2 - 3",
    "1 / 3", "2 * (3 + 4) / 7",
]  # fmt: skip
BAD_EXPRESSIONS = ["1 / 0", "2 ** 3", "x * 2", "", "1 2", "(1 + 2", " 1 + 2", "5 % 2", "2 // 3"]
ANSWERS = [
    ("3562719", True, 1, "3562719"), ("3562719.", False, 0, "3562719"), (" 3562719 ", True, 2, "3562719"),
    ("4821 * 739", False, 0, "3562719"), ("4821 * 739 = 3562719", True, 1, "3562719"),
    ("The product is 3562719.", False, 1, "3562719"), ("", True, 1, "3562719"), ("-5", False, 0, "-5"),
    ("12 and 13", True, 3, "408"), ("408\n", False, 0, "408"),
]  # fmt: skip


@pytest.fixture
def agents_path(monkeypatch):
    """The agents' folder on the path, as it is for a script run from it."""
    monkeypatch.syspath_prepend(str(AGENTS))
    import calculator_openai

    return calculator_openai


def node_eval(source: str) -> str:
    """What a Node ES module prints (skipped without node)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    done = subprocess.run(
        ["node", "--input-type=module", "-e", source], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_node_agent_calculates_and_scores_as_the_python_agent(agents_path):
    py = agents_path
    url = (AGENTS / "calculator_node.mjs").as_uri()
    cases = {"good": EXPRESSIONS, "bad": BAD_EXPRESSIONS, "answers": ANSWERS}
    out = node_eval(
        f'import {{ calculate, score, TOOLS, SYSTEM, MAX_CALLS }} from "{url}";\n'
        f"const cases = {json.dumps(cases)};\n"
        "console.log(JSON.stringify({\n"
        "  good: cases.good.map(calculate), bad: cases.bad.map(calculate),\n"
        "  answers: cases.answers.map((a) => score(...a)), tool: TOOLS[0], system: SYSTEM, max: MAX_CALLS,\n"
        "}));"
    )
    node = json.loads(out)
    assert node["good"] == [py.calculate(e) for e in EXPRESSIONS]
    python_bad = [py.calculate(e) for e in BAD_EXPRESSIONS]
    assert all(r.startswith("error: ") for r in python_bad), python_bad
    assert all(r.startswith("error: ") for r in node["bad"]), node["bad"]
    assert node["answers"] == [py.score(*a) for a in ANSWERS]
    # the same tool, system line and budget: Responses' function tool is chat's function, flattened
    assert node["tool"] == {"type": "function", **py.TOOLS[0]["function"]}
    assert node["system"] == py.SYSTEM and node["max"] == py.MAX_CALLS


def test_the_anthropic_agent_uses_the_python_agent_s_tool_and_reward(agents_path):
    pytest.importorskip("anthropic")
    import calculator_anthropic

    py = agents_path
    assert calculator_anthropic.score is py.score and calculator_anthropic.calculate is py.calculate
    function, tool = py.TOOLS[0]["function"], calculator_anthropic.TOOL
    assert tool == {
        "name": function["name"],
        "description": function["description"],
        "input_schema": function["parameters"],
    }


# -- one episode of each through the gateway ---------------------------------------------------------


@pytest.fixture(scope="module")
def row() -> dict:
    return calculator.rows("val", 0, n_val=1)[0]


def scripted_engine(tiny, row: dict) -> ScriptedEngine:
    """A model that, in every agent's episode, first calls the calculator with the question's numbers
    (the worked exchange holds the prompt's first two assistant turns), then answers the product."""
    model, tok = tiny
    info = row["extra_info"]
    call = f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{info["a"]} * {info["b"]}"}}}}</tool_call>'
    turns = {3: call, 4: row["reward_model"]["ground_truth"]}
    forced = {k: [*tok.encode(text, add_special_tokens=False), tok.eos_token_id] for k, text in turns.items()}

    def script(context: list[int]) -> list[int] | None:
        return forced.get(tok.decode(context).count("<|im_start|>assistant"))

    return ScriptedEngine(script, inner=HFEngine(model, tok))


def one_episode(tiny, row: dict, agent: dict[str, str]) -> tuple[Batch, dict[str, float], ScriptedEngine]:
    """One episode of `agent` (its rollout.agent keys) on `row`, the batch as the trainer gets it."""
    _, tok = tiny
    engine = scripted_engine(tiny, row)
    cfg = {
        **agent,
        "rollout.agent.chat_template": str(TEMPLATE),
        "rollout.agent.timeout_s": 120,
        "data.max_prompt_length": 640,
        "data.max_response_length": 160,
    }
    config = load_config(None, [f"{k}={v}" for k, v in cfg.items()])
    ids, mask = left_pad([chat_prompt(tok, row["prompt"][-1]["content"])], tok.pad_token_id)
    rows = Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [copy.deepcopy(row["prompt"])],
            "data_source": [row["data_source"]],
            "ground_truth": [row["reward_model"]["ground_truth"]],
            "extra_info": [copy.deepcopy(row["extra_info"])],
            "index": [0],
        },
    )
    with FunctionAgentRollout(engine, tok, config, tok.pad_token_id) as rollout:
        out, metrics = rollout.generate(
            split_generation_input(rows, rows=True), SamplingParams(max_new_tokens=160)
        )
    return group_and_merge(rows, out, 1), metrics, engine


def check_episode(batch: Batch, metrics: dict[str, float], engine: ScriptedEngine, first_prompt: list[int]):
    assert list(batch["agent_error"]) == [""], batch["agent_error"]
    assert list(batch["agent_reward"]) == [1.0]
    # two calls, the first on the same prompt as the other agents', token for token
    assert len(engine.rows) == 2 and engine.rows[0].context == first_prompt
    assert metrics["agent/calls/mean"] == 2 and metrics["agent/untrained_calls/mean"] == 0
    assert metrics["agent/tool_calls/mean"] == 1  # the model's call, read by the gateway
    assert metrics["agent/template_forks"] == 0 and metrics["agent/template_drift"] == 0
    # the agent ran the tool on the call and copied nothing wrong: its own numbers
    assert metrics["agent/fn/calls"] == 1 and metrics["agent/fn/called_right"] == 1
    assert metrics["agent/fn/acc"] == 1 and metrics["agent/fn/formatted"] == 1
    assert batch["response_mask"].sum().item() > 0


@pytest.fixture(scope="module")
def openai_prompt(tiny, row) -> list[int]:
    """The first prompt of the chat-completions agent's episode, which the other two must match."""
    pytest.importorskip("openai")
    batch, metrics, engine = one_episode(
        tiny, row, {"rollout.agent.entrypoint": f"{AGENTS / 'calculator_openai.py'}:run"}
    )
    check_episode(batch, metrics, engine, engine.rows[0].context)
    return engine.rows[0].context


def test_the_anthropic_agent_trains_through_the_gateway(tiny, row, openai_prompt):
    pytest.importorskip("anthropic")
    command = shlex.join([sys.executable, str(AGENTS / "calculator_anthropic.py")])
    batch, metrics, engine = one_episode(tiny, row, {"rollout.agent.command": command})
    check_episode(batch, metrics, engine, openai_prompt)


@pytest.fixture(scope="module")
def node_agent(tmp_path_factory) -> Path:
    """calculator_node.mjs in a folder with the `openai` npm package installed beside it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    folder = tmp_path_factory.mktemp("calculator_node")
    cmd = ["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--silent", "openai"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("npm install openai timed out (no network?)")
    if done.returncode != 0:
        pytest.skip(f"npm install openai failed (no network?): {done.stderr.strip()[-300:]}")
    return Path(shutil.copy(AGENTS / "calculator_node.mjs", folder))


def test_the_node_agent_trains_through_the_gateway(tiny, row, openai_prompt, node_agent):
    batch, metrics, engine = one_episode(tiny, row, {"rollout.agent.command": f"node {node_agent}"})
    check_episode(batch, metrics, engine, openai_prompt)


def test_the_benchmark_names_the_agents():
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--agent {openai,anthropic,node}" in done.stdout
