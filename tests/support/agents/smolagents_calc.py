"""A calculator agent on smolagents (`pip install smolagents`), written as its docs show: a
`ToolCallingAgent` with one `@tool`, on `OpenAIServerModel` (chat completions) pointed at the
episode's base URL and key. Nothing in it knows turnrl.

One setting is the gateway's: `tool_choice="auto"`. smolagents asks for `tool_choice: "required"`
by default, which would need constrained decoding; the gateway refuses it (400) rather than
pretend, and the model's own `tool_choice` keyword replaces it on every call.
"""

from __future__ import annotations

import json
import os
import sys

from smolagents import LogLevel, OpenAIServerModel, ToolCallingAgent, tool

from turnrl.recipes.agents.calculator_openai import calculate

MAX_STEPS = 3
MAX_TOKENS = 48


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression, such as "12 * 34".
    """
    return calculate(expression)  # the shipped calculator agent's own tool


def build(base_url: str, api_key: str, model: str) -> ToolCallingAgent:
    llm = OpenAIServerModel(
        model_id=model,
        api_base=base_url,
        api_key=api_key,
        client_kwargs={"max_retries": 0},  # a refused call is the episode's answer
        tool_choice="auto",
        max_tokens=MAX_TOKENS,
    )
    return ToolCallingAgent(tools=[calculator], model=llm, max_steps=MAX_STEPS, verbosity_level=LogLevel.OFF)


def _reward(answer: object, row: dict) -> float:
    return 1.0 if str(row.get("ground_truth", "")) in str(answer or "") else 0.0


def run(client, model, row):
    """`rollout.agent.entrypoint=...smolagents_calc.py:run`."""
    agent = build(str(client.base_url), client.api_key, model)
    answer = agent.run(row["prompt"][-1]["content"])
    return _reward(answer, row)


if __name__ == "__main__":
    # `rollout.agent.command`: the row on stdin, the episode's URL and key in OpenAI's variables
    row = json.load(sys.stdin)
    agent = build(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], os.environ["TURNRL_MODEL"])
    print(json.dumps({"reward": _reward(agent.run(row["prompt"][-1]["content"]), row)}))
