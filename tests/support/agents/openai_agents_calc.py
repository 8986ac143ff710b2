"""A calculator agent on the OpenAI Agents SDK (`pip install openai-agents`), written as its own docs
show: an `Agent` with one `@function_tool`, run by the `Runner` on the SDK's default model (the
Responses API, `OpenAIResponsesModel`) over an `AsyncOpenAI` client. Nothing in it knows turnrl but
the episode's base URL and key, read from the client it is handed (`run`, `run_async`,
`run_streamed`) or from OPENAI_BASE_URL / OPENAI_API_KEY when started as a process (`__main__`).
"""

from __future__ import annotations

import json
import os
import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from turnrl.recipes.agents.calculator_openai import calculate

INSTRUCTIONS = "You are a calculator. Use the calculator tool, then give the number."
MAX_TOKENS = 48
MAX_TURNS = 3


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression, such as "12 * 34".
    """
    return calculate(expression)  # the shipped calculator agent's own tool


def build(base_url: str, api_key: str, model: str) -> Agent:
    # no traces are exported anywhere: the episode's key is the gateway's, not OpenAI's
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return Agent(
        name="calculator",
        instructions=INSTRUCTIONS,
        tools=[calculator],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=ModelSettings(max_tokens=MAX_TOKENS),
    )


def _question(row: dict) -> str:
    return row["prompt"][-1]["content"]


def _reward(final_output: object, row: dict) -> float:
    return 1.0 if str(row.get("ground_truth", "")) in str(final_output or "") else 0.0


def run(client, model, row):
    """`rollout.agent.entrypoint=...openai_agents_calc.py:run`: `Runner.run_sync`."""
    agent = build(str(client.base_url), client.api_key, model)
    result = Runner.run_sync(agent, _question(row), max_turns=MAX_TURNS)
    return _reward(result.final_output, row)


async def run_async(client, model, row):
    """`rollout.agent.entrypoint=...openai_agents_calc.py:run_async`: `await Runner.run`."""
    agent = build(str(client.base_url), client.api_key, model)
    result = await Runner.run(agent, _question(row), max_turns=MAX_TURNS)
    return _reward(result.final_output, row)


async def run_streamed(client, model, row):
    """`rollout.agent.entrypoint=...openai_agents_calc.py:run_streamed`: `Runner.run_streamed`, its
    events read to the end (the calls go out with `stream: true`)."""
    agent = build(str(client.base_url), client.api_key, model)
    result = Runner.run_streamed(agent, _question(row), max_turns=MAX_TURNS)
    async for _ in result.stream_events():
        pass
    return _reward(result.final_output, row)


if __name__ == "__main__":
    # `rollout.agent.command`: the row on stdin, the episode's URL and key in OpenAI's variables
    row = json.load(sys.stdin)
    agent = build(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], os.environ["TURNRL_MODEL"])
    result = Runner.run_sync(agent, _question(row), max_turns=MAX_TURNS)
    print(json.dumps({"reward": _reward(result.final_output, row)}))
