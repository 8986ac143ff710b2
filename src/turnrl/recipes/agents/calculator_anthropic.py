"""The calculator agent of calculator_openai.py, written on the `anthropic` SDK (Messages API), and
trained by turnrl as a process, as it is:

    turnrl train calculator_agent model.path=smollm2-135m-instruct rollout.multi_turn.enable=false \
        rollout.agent.command="python src/turnrl/recipes/agents/calculator_anthropic.py" \
        rollout.agent.chat_template=examples/templates/chatml_tools.jinja

A script, as an Anthropic-API agent is written: `anthropic.Anthropic()` reads ANTHROPIC_BASE_URL and
ANTHROPIC_API_KEY, the row is the JSON file at TURNRL_ROW_FILE and the model name TURNRL_MODEL (turnrl
sets all four per episode; against Anthropic's API, set them yourself). The tool is the OpenAI agent's
calculator with its schema as `input_schema`; the model calls it, the SDK hands back `tool_use` blocks,
each result goes back in a user turn of `tool_result` blocks, and the episode ends when the model
answers without a call. The system line, the worked exchange, the call budget, the tool and the
reward are calculator_openai.py's, imported from the file beside this one, so the two agents differ
in their client alone. The last line printed is the reward and the numbers validation reports, as
JSON: `{"reward": 1.0, "acc": 1.0, "formatted": 1.0, "called_right": 1.0, "calls": 1.0}`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anthropic
from calculator_openai import MAX_CALLS, SYSTEM, TOOLS, calculate, score

TOOL = {
    "name": TOOLS[0]["function"]["name"],
    "description": TOOLS[0]["function"]["description"],
    "input_schema": TOOLS[0]["function"]["parameters"],
}
"""The same calculator, in the Messages API's shape."""


def worked_example(x: int, y: int) -> list[dict[str, Any]]:
    """calculator_openai.worked_example's exchange in Messages form: the call a `tool_use` block, its
    result a `tool_result` block in the next user turn."""
    use = {"type": "tool_use", "id": "toolu_0", "name": "calculator", "input": {"expression": f"{x} * {y}"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_0", "content": str(x * y)}
    return [
        {"role": "user", "content": f"Compute {x} * {y}."},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": str(x * y)},
    ]


def expression_of(block: Any) -> str:
    """The `expression` a tool_use block asked for ('' when its input has none)."""
    return str(block.input.get("expression", "")) if isinstance(block.input, dict) else ""


def episode(client: anthropic.Anthropic, model: str, row: dict[str, Any]) -> dict[str, float]:
    """One episode on `row`: calls until an answer without a call (at most MAX_CALLS), then its score."""
    info = row["extra_info"]
    x, y = (int(v) for v in info["example"].split("*"))
    truth = str(row["ground_truth"])
    messages: list[dict[str, Any]] = [
        *worked_example(x, y),
        {"role": "user", "content": f"Compute {info['a']} * {info['b']}."},
    ]
    called_right, answer, calls = False, "", 0
    for _ in range(MAX_CALLS):
        reply = client.messages.create(
            model=model, system=SYSTEM, messages=messages, tools=[TOOL], max_tokens=40
        )
        messages.append({"role": "assistant", "content": reply.content})
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            answer = "".join(block.text for block in reply.content if block.type == "text")
            break
        results = []
        for use in uses:
            result = calculate(expression_of(use))
            calls += 1
            called_right = called_right or result == truth
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": result})
        messages.append({"role": "user", "content": results})
    return score(answer, called_right, calls, truth)


def main() -> None:
    row = json.loads(Path(os.environ["TURNRL_ROW_FILE"]).read_text())
    # no retries, as the OpenAI agent's client: a retried call is one more sample of the same turn
    client = anthropic.Anthropic(max_retries=0)
    print(json.dumps(episode(client, os.environ["TURNRL_MODEL"], row)), flush=True)


if __name__ == "__main__":
    main()
