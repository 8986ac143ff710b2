"""Agent frameworks, unmodified, as the agents turnrl trains: the OpenAI Agents SDK (`openai-agents`:
an `Agent` with a `@function_tool`, run by the `Runner` on its default Responses model) and
smolagents (a `ToolCallingAgent` with a `@tool` on `OpenAIServerModel`, chat completions). Each is
an agent written as its docs show (tests/support/agents/openai_agents_calc.py, smolagents_calc.py)
run by the function-agent rollout against a real gateway on loopback, the in-process `hf` engine
over tiny-random, and a chat template that renders tools; the Agents SDK also as a process
(`rollout.agent.command`) and through one `turnrl train` step.

tiny-random writes noise, so where a tool call is needed the engine's first turns are scripted
(tests/support/scripted_engine.py), recorded as any. What is checked: the framework read the tool
call, ran its tool and sent the result back; the recorded ids are the engine's own rows, each
after the exact context the engine was given; and how the episode was recorded. The Agents SDK
sends the whole history back as the gateway answered it: one sample per episode, no fork.
smolagents writes its tool calls back as text ("Calling tools: [...]") and the results as user
messages ("Observation: ..."): every call after the first drifts, and forks a sample of its own.

Skipped, with the reason, where the framework is not installed (`pip install -e ".[agent-frameworks]"`).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_batches import chat_prompt, segments, unpadded
from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.cli import console_script
from tests.support.gateway_serving import CALL, tool_engine
from tests.support.recording_engine import RecordingEngine
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.functions.rollout import FunctionAgentRollout
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.trainer.stages import group_and_merge, split_generation_input

AGENTS = Path(__file__).parents[1] / "support" / "agents"
OPENAI_AGENTS = AGENTS / "openai_agents_calc.py"
SMOLAGENTS = AGENTS / "smolagents_calc.py"
QUESTION = "Compute 12 * 34."
BUDGET = 96
# smolagents' system prompt (its tool-calling instructions and examples) is about 1,000 tokens
SMOL_PROMPT = 1536
FINAL = '<tool_call>{"name": "final_answer", "arguments": {"answer": "408"}}</tool_call>'

needs_openai_agents = pytest.mark.skipif(
    importlib.util.find_spec("agents") is None,
    reason="openai-agents is not installed (pip install -e '.[agent-frameworks]')",
)
needs_smolagents = pytest.mark.skipif(
    importlib.util.find_spec("smolagents") is None,
    reason="smolagents is not installed (pip install -e '.[agent-frameworks]')",
)


@pytest.fixture(scope="module")
def tiny_tool(tiny, tmp_path_factory):
    """tiny-random, its tokenizer with a template that renders tools, and that template's file."""
    model, tok = tiny
    path = tmp_path_factory.mktemp("templates") / "tools.jinja"
    path.write_text(TOOL_TEMPLATE)
    tool_tok = copy.copy(tok)
    tool_tok.chat_template = TOOL_TEMPLATE
    return model, tool_tok, str(path)


def make(tiny_tool, engine, **overrides) -> FunctionAgentRollout:
    _, tok, template = tiny_tool
    cfg = {
        "rollout.agent.chat_template": template,
        "rollout.agent.timeout_s": 60,
        "data.max_response_length": BUDGET,
        **overrides,
    }
    config = load_config(None, [f"{k}={v}" for k, v in cfg.items()])
    return FunctionAgentRollout(engine, tok, config, tok.pad_token_id)


def run(rollout, tok, n: int = 2):
    """One row (the question, 408 its ground truth), `n` episodes, merged as the reward stage gets them."""
    ids, mask = left_pad([chat_prompt(tok, QUESTION)], tok.pad_token_id)
    rows = Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [[{"role": "user", "content": QUESTION}]],
            "data_source": ["agent/test"],
            "ground_truth": ["408"],
            "extra_info": [{}],
            "index": [0],
        },
    )
    out, metrics = rollout.generate(
        split_generation_input(rows, rows=True), SamplingParams(max_new_tokens=BUDGET, n=n)
    )
    return group_and_merge(rows, out, n), metrics


def engine_rows(engine) -> list[tuple[list[int], list[int]]]:
    """(context, ids) of every row the engine sampled or played: a ScriptedEngine keeps `Row`s, a
    RecordingEngine (context, ids, log-probs) tuples."""
    return [(r.context, r.ids) if hasattr(r, "context") else (r[0], r[1]) for r in engine.rows]


def assert_recorded_as_sampled(batch: Batch, row: int, engine) -> list[tuple[int, list[int]]]:
    """Every model run of the row is an engine row's ids, right after that row's exact context."""
    full, mask, _ = unpadded(batch, row)
    pos = len(full) - len(mask)
    runs = segments(batch, row)
    for kind, ids in runs:
        if kind == 1:
            assert (full[:pos], ids) in engine_rows(engine), (
                f"row {row}: sampled ids at {pos} not the engine's"
            )
        pos += len(ids)
    return runs


def full_prompt(batch: Batch, row: int) -> list[int]:
    full, mask, _ = unpadded(batch, row)
    return full[: len(full) - len(mask)]


def smol_engine(model, tok) -> ScriptedEngine:
    """smolagents' first call writes a calculator call, its second calls `final_answer` (its only
    way to end a run); one assistant turn per call in the context, whatever it was rewritten to."""
    turns = {1: CALL, 2: FINAL}
    forced = {k: [*tok.encode(text, add_special_tokens=False), tok.eos_token_id] for k, text in turns.items()}
    return ScriptedEngine(
        lambda context: forced.get(tok.decode(context).count("<|im_start|>assistant")),
        inner=HFEngine(model, tok),
    )


# -- the OpenAI Agents SDK ---------------------------------------------------------------------------
@needs_openai_agents
@pytest.mark.parametrize("entry", ["run", "run_async", "run_streamed"])
def test_openai_agents_runner_calls_its_tool_and_records_one_sample(tiny_tool, entry):
    """`Runner.run_sync` (on the episode's thread), `await Runner.run` (on its event loop) and
    `Runner.run_streamed` (the Responses stream's events): the scripted calculator call is read by
    the SDK, its tool runs, the output goes back as a `function_call_output` item with the call
    item as it came, and the answer ends the run."""
    model, tok, _ = tiny_tool
    engine = tool_engine(model, tok)
    with make(tiny_tool, engine, **{"rollout.agent.entrypoint": f"{OPENAI_AGENTS}:{entry}"}) as rollout:
        batch, metrics = run(rollout, tok)
    assert metrics["agent/errors/exception"] == 0, list(batch["agent_error"])
    assert list(batch["agent_reward"]) == [1.0, 1.0]  # "The answer is 408." was its final output
    assert metrics["agent/calls/mean"] == 2 and metrics["agent/template_drift"] == 0
    assert metrics["agent/template_forks"] == 0 and len(batch) == 2
    for row in range(2):
        runs = assert_recorded_as_sampled(batch, row, engine)
        assert [kind for kind, _ in runs] == [1, 0, 1], runs  # the call, the tool's output, the answer
        observation = tok.decode(runs[1][1], skip_special_tokens=False)
        assert "<|im_start|>tool\n408<|im_end|>" in observation, observation
        text = tok.decode(full_prompt(batch, row), skip_special_tokens=False)
        assert text.startswith("<|im_start|>system\nTools: calculator<|im_end|>")  # its function tool
        assert "<|im_start|>system\nYou are a calculator." in text and QUESTION in text  # instructions


@needs_openai_agents
def test_openai_agents_on_unscripted_samples_records_the_engine_s_ids(tiny_tool):
    """The real engine's noise: whatever the SDK makes of it, every recorded id is the engine's.

    Noise is mostly cut by the agent's `max_tokens` (the call's `max_output_tokens`, below the
    episode's budget): the answer is then `status: "incomplete"`, as OpenAI sends it. Older SDKs
    (0.20) take its text as the final output; newer ones (0.24) raise ModelBehaviorError for it,
    which fails the episode, its calls recorded all the same."""
    model, tok, _ = tiny_tool
    engine = RecordingEngine(model, tok)
    with make(tiny_tool, engine, **{"rollout.agent.entrypoint": f"{OPENAI_AGENTS}:run"}) as rollout:
        batch, metrics = run(rollout, tok)
    for error in batch["agent_error"]:
        assert error == "" or ("ModelBehaviorError" in error and "incomplete" in error), error
    assert metrics["agent/template_forks"] == 0 and len(batch) == 2 and engine.rows
    for row in range(2):
        assert assert_recorded_as_sampled(batch, row, engine)[0][0] == 1  # the first run is sampled


@needs_openai_agents
def test_openai_agents_as_a_process_reads_openai_s_variables(tiny_tool):
    model, tok, _ = tiny_tool
    engine = tool_engine(model, tok)
    command = f"{sys.executable} {OPENAI_AGENTS}"
    with make(tiny_tool, engine, **{"rollout.agent.command": command}) as rollout:
        batch, metrics = run(rollout, tok, n=1)
    assert list(batch["agent_error"]) == [""] and list(batch["agent_reward"]) == [1.0]
    assert metrics["agent/calls/mean"] == 2 and metrics["agent/template_forks"] == 0
    assert [kind for kind, _ in assert_recorded_as_sampled(batch, 0, engine)] == [1, 0, 1]


@pytest.mark.slow
@needs_openai_agents
def test_openai_agents_trains_one_step_through_turnrl_train(tmp_path):
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    args = [
        "model.path=tiny-random",
        "data.task=calculator",
        "data.task_args.n_train=4",
        "data.task_args.n_val=2",
        "data.train_batch_size=2",
        "data.max_response_length=48",
        "rollout.n=2",
        f"rollout.agent.entrypoint={OPENAI_AGENTS}:run",
        f"rollout.agent.chat_template={template}",
        "rollout.agent.timeout_s=60",
        "actor.ppo_mini_batch_size=1",
        "actor.ppo_micro_batch_size=4",
        "trainer.total_training_steps=1",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]
    proc = subprocess.run([console_script(), "train", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in rows if "critic/score/mean" in r]
    assert step["agent/calls/mean"] >= 1 and step["agent/errors/exception"] == 0
    assert step["agent/template_forks"] == 0 and "actor/pg_loss" in step


# -- smolagents --------------------------------------------------------------------------------------
@needs_smolagents
def test_smolagents_tool_call_round_trips_and_each_rewritten_call_forks(tiny_tool):
    model, tok, _ = tiny_tool
    engine = smol_engine(model, tok)
    overrides = {"rollout.agent.entrypoint": f"{SMOLAGENTS}:run", "data.max_prompt_length": SMOL_PROMPT}
    with make(tiny_tool, engine, **overrides) as rollout:
        batch, metrics = run(rollout, tok)
    assert metrics["agent/errors/exception"] == 0, list(batch["agent_error"])
    assert list(batch["agent_reward"]) == [1.0] * 4  # final_answer("408") was the run's answer
    # the second call sends the first answer back as text: drift, and a sample of its own
    assert metrics["agent/calls/mean"] == 2 and metrics["agent/template_drift"] == 2
    assert metrics["agent/template_forks"] == 2 and metrics["agent/untrained_calls/mean"] == 0
    assert len(batch) == 4 and list(batch["episode_row"]) == [0, 0, 1, 1]
    assert list(batch["episode_last"]) == [False, True, False, True]
    for row in range(4):
        assert [kind for kind, _ in assert_recorded_as_sampled(batch, row, engine)] == [1]
        text = tok.decode(full_prompt(batch, row), skip_special_tokens=False)
        assert text.startswith("<|im_start|>system\nTools: calculator, final_answer<|im_end|>")
        if row % 2:
            # the fork's prompt: smolagents read the scripted call, ran the tool, and sent both back
            assert "<|im_start|>assistant\nCalling tools:\n[{" in text and "'name': 'calculator'" in text
            assert "<|im_start|>user\nObservation:\n408<|im_end|>" in text, text[-400:]


@needs_smolagents
def test_smolagents_default_tool_choice_is_refused_naming_it(tiny_tool):
    """Left at its default, `OpenAIServerModel` asks for `tool_choice: "required"`, which the gateway
    cannot honour without constrained decoding: the first call is a 400 naming the field, and the
    episode ends with that error, recording nothing."""
    from smolagents import LogLevel, OpenAIServerModel, ToolCallingAgent
    from smolagents.utils import AgentGenerationError

    from tests.support.agents.smolagents_calc import calculator
    from tests.support.gateway_serving import serving

    model, tok, _ = tiny_tool
    engine = RecordingEngine(model, tok)
    with serving(engine, tok) as gateway:
        episode = gateway.open("smol", SamplingParams(max_new_tokens=BUDGET))
        llm = OpenAIServerModel(
            "policy", api_base=gateway.base_url("smol"), api_key=episode.key, client_kwargs={"max_retries": 0}
        )
        agent = ToolCallingAgent(tools=[calculator], model=llm, max_steps=1, verbosity_level=LogLevel.OFF)
        with pytest.raises(AgentGenerationError, match="tool_choice: 'required' is not"):
            agent.run(QUESTION)
        assert engine.rows == [] and episode.trajectory.episode is None
