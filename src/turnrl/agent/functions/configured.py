"""The agent `rollout.agent` names: a function (`entrypoint`), an environment (`env`) or a process
(`command`), exactly one of them."""

from __future__ import annotations

from typing import Any

from turnrl.agent.functions.entrypoint import AgentFunction, AgentLoadError, load_agent, load_env_agent
from turnrl.agent.functions.process import load_process_agent

KEYS = ("entrypoint", "env", "command")


def load_configured(ac: Any, multi_turn: Any = None) -> AgentFunction:
    """The agent of `ac` (`rollout.agent`), loaded; one line (AgentLoadError) when it names none,
    more than one, or one that does not load. `multi_turn` (`rollout.multi_turn`) names the sandbox
    of a process agent's workspaces."""
    named = [key for key in KEYS if getattr(ac, key)]
    if len(named) != 1:
        keys = " and ".join(f"rollout.agent.{k}" for k in named) or "none of rollout.agent." + ", ".join(KEYS)
        raise AgentLoadError(f"{keys}: name the agent with exactly one of them")
    if ac.env:
        return load_env_agent(ac.env, max_turns=ac.max_calls, timeout_s=ac.timeout_s)
    if ac.command:
        return load_process_agent(ac, multi_turn)
    return load_agent(ac.entrypoint)
