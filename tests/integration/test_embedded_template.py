"""The embedded model's chat template (also tiny-random's): SmolLM2's own, to the byte, for
conversations without tools, and one that renders tools, so an OpenAI-SDK agent that sends tools
trains on it with no `rollout.agent.chat_template`, every call recorded (no template drift)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.support.cli import console_script
from turnrl.models.loader import load_tokenizer, model_directory

AGENT = Path(__file__).parents[1] / "support" / "agents" / "two_calls.py"
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
        [
            {"role": "system", "content": ""},
            {"role": "user", "content": "x\n\ny "},
            {"role": "assistant", "content": " z"},
        ],
    ],
)
def test_without_tools_it_is_smollm2s_own_template(messages):
    own = AutoTokenizer.from_pretrained(model_directory("smollm2-135m-instruct"))  # the model's files
    ours = load_tokenizer("smollm2-135m-instruct")
    assert own.chat_template != ours.chat_template
    for generation_prompt in (True, False):
        kw = {"tokenize": False, "add_generation_prompt": generation_prompt}
        assert ours.apply_chat_template(messages, **kw) == own.apply_chat_template(messages, **kw)


def test_with_tools_it_shows_them_and_the_calls():
    tok = load_tokenizer("tiny-random")
    call = {"id": "c0", "type": "function", "function": {"name": "calc", "arguments": '{"e": "1+1"}'}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "2"},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face\n\n"
        "You may call these tools."
    )
    assert '{"name": "calc", "parameters": {"type": "object"}}\n</tools><|im_end|>\n' in text
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "calc", "arguments": "{\\"e\\": \\"1+1\\"}"}</tool_call><|im_end|>\n'
        in text
    )
    assert text.endswith("<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
def test_an_openai_sdk_agent_with_tools_trains_with_no_template_option(tmp_path):
    """The two-call agent (tools, a short first reply appended as the SDK returns it, a user
    message, a second call) on tiny-random: before, it stopped with 'the chat template does not
    render tools'; with a tools template given it was reported drifting in every episode. Now every
    call of every episode is recorded."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [console_script(), "train", "model.path=tiny-random", "data.task=calculator",
         "data.task_args.n_train=8", "data.task_args.n_val=2", "data.train_batch_size=4", "rollout.n=4",
         "data.max_response_length=48", f"rollout.agent.entrypoint={AGENT}:run",
         "actor.ppo_mini_batch_size=2", "trainer.total_training_steps=2", "trainer.test_freq=0",
         "trainer.val_before_train=false", "trainer.logger=[jsonl]", f"trainer.default_local_dir={run}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "critic/score/mean" in s]
    assert len(steps) == 2
    for s in steps:
        assert s["agent/calls/mean"] == 2.0 and s["agent/errors/exception"] == 0
        assert s["agent/template_drift"] == 0 and s["agent/untrained_calls/mean"] == 0.0
