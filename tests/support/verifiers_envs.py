"""verifiers (0.4, `verifiers.v1`) environments for tests/integration/test_verifiers_env.py, loaded
by path as `verifiers:tests/support/verifiers_envs.py:<loader>`.

One taskset, two environments: `single_turn` (the `null` chat harness, one turn) and `with_tool`
(the same tasks with the `calc` MCP toolset, up to 3 turns). Both run verifiers' subprocess
runtime on this machine and cap each reply at 24 tokens, so a random model's episode is short.
Loaded by path, this module is imported as `turnrl_user_<hash>` (turnrl.plugins.load_attribute),
a top-level name: verifiers finds the taskset by that name (`__name__`), as it would an installed
taskset package by its id.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

from tests.support.verifiers_parts import CalcToolset, EchoData

QUESTIONS = [
    ("Say the word blue.", "blue"),
    ("What is 2+3? Answer with a number.", "5"),
    ("Name a fruit that is yellow.", "banana"),
]
LENGTH_CAP = 200
"""Characters of reply that earn the full length reward (24 random tokens are ~50-150)."""
CONTAINS_WEIGHT, LENGTH_WEIGHT = 1.0, 0.5


class EchoTaskConfig(vf.TaskConfig):
    tools: bool = False
    """Serve the `calc` toolset to the agent."""
    toolset: vf.ToolsetConfig = vf.ToolsetConfig()


class EchoTask(vf.Task[EchoData, vf.State, EchoTaskConfig]):
    @classmethod
    def toolsets(cls, config: EchoTaskConfig) -> list[vf.Toolset]:
        return [CalcToolset(config.toolset)] if config.tools else []

    @vf.reward(weight=CONTAINS_WEIGHT)
    async def contains(self, task: EchoData, trace: vf.Trace) -> float:
        return contains_score(task.answer, trace.last_reply)

    @vf.reward(weight=LENGTH_WEIGHT)
    async def length(self, trace: vf.Trace) -> float:
        return length_score(trace.last_reply)

    @vf.metric
    async def chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


def contains_score(answer: str, reply: str) -> float:
    return float(answer.lower() in reply.lower())


def length_score(reply: str) -> float:
    """A random model's replies differ in length, so its episodes get varied rewards."""
    return min(len(reply), LENGTH_CAP) / LENGTH_CAP


class EchoConfig(vf.TasksetConfig):
    task: EchoTaskConfig = EchoTaskConfig()


class EchoTaskset(vf.Taskset[EchoTask, EchoConfig]):
    def load(self):
        for i, (question, answer) in enumerate(QUESTIONS):
            yield EchoTask(EchoData(id=f"q{i}", prompt=question, answer=answer), self.config.task)


__all__ = ["EchoTaskset"]


def _config(tools: bool, max_turns: int) -> dict[str, Any]:
    return {
        "taskset": {"id": __name__, "task": {"tools": tools}},
        "agent": {
            "harness": {"id": "null"},
            "runtime": {"type": "subprocess"},
            "sampling": {"max_tokens": 24},
            "max_turns": max_turns,
        },
    }


def single_turn() -> vf.Env:
    return vf.load_environment(vf.resolve_env_config(_config(tools=False, max_turns=1)))


def with_tool() -> vf.EnvConfig:
    """An EnvConfig, which turnrl constructs: the loader may return either."""
    return vf.resolve_env_config(_config(tools=True, max_turns=3))


def not_an_env() -> int:
    return 42


def broken() -> vf.Env:
    raise RuntimeError("the dataset is unreachable")
