"""One sandbox session per episode, for tasks that bring a workspace (Harbor tasks): opened with the
task's starting files before the episode's first turn, handed to the `bash` and `editor` tools with
each call, verified by the task's tests once the episode ends (`tests/test.sh` in the same session),
then deleted. A session the server cannot open, or a verifier whose reward cannot be read, is a
failed episode (scored 0, its reason kept); the session's `ttl_s` removes what a crash leaves.

    ws = Workspaces(url, api_key, ttl_s)          # on the tools' event loop (the executor's)
    session = await ws.open(row)                  # None: the row brings no workspace
    outcome = await ws.finish(session, row)       # the verifier's reward, the session gone
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from turnrl.agent.harbor.reader import task_from_row
from turnrl.agent.harbor.reward import verify
from turnrl.servers.sandbox.client import SandboxClient, SandboxSession


def brings_workspace(row: dict[str, Any]) -> bool:
    """A row of a Harbor task (`extra_info.harbor`)."""
    info = row.get("extra_info")
    return isinstance(info, dict) and isinstance(info.get("harbor"), dict)


@dataclass(frozen=True)
class Finished:
    """What the verifier made of an episode's workspace."""

    reward: float | None
    """The task's reward; None when the episode failed (`error` says why)."""
    error: str = ""
    reason: str = ""
    """Why this reward (the verifier's exit status, the reward file read)."""


class Workspaces:
    """Opens, verifies and removes the episodes' sessions on one sandbox server (its client is used
    on the tools' event loop only)."""

    def __init__(self, url: str, api_key: str | None, ttl_s: float) -> None:
        self.client = SandboxClient(url, timeout=60.0, api_key=api_key)
        self.ttl_s = ttl_s

    async def open(self, row: dict[str, Any]) -> SandboxSession | None:
        """The row's workspace, made from its task's starting files; None for a row without one.
        Raises the sandbox's error (the episode then fails before its first turn)."""
        if not brings_workspace(row):
            return None
        task = task_from_row(row)
        # the session outlives the agent's time and the verifier's, never much more
        ttl = min(self.ttl_s, task.agent_timeout_s + task.verifier_timeout_s + 60.0)
        session = SandboxSession(self.client, task.workspace_files(), ttl)
        return await session.__aenter__()

    async def finish(self, session: SandboxSession | BaseException | None, row: dict[str, Any]) -> Finished:
        """Run the task's tests in the episode's session, then delete it (whatever happened); a
        session that could not be opened (None, or the error `open` raised) fails the episode."""
        if session is None or isinstance(session, BaseException):
            why = f": {one_line(session)}" if session is not None else ""
            return Finished(None, f"workspace: the session could not be opened{why}")
        try:
            verdict = await verify(session, task_from_row(row))
        except Exception as err:  # the sandbox failed mid-way: the episode cannot be scored
            return Finished(None, f"workspace: the verifier could not run: {one_line(err)}")
        finally:
            await session.delete()
        if not verdict.ok:
            return Finished(None, verdict.reason, verdict.reason)
        return Finished(verdict.reward, "", verdict.reason)

    async def aclose(self) -> None:
        await self.client.aclose()


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def carried_fields(finished: list[Finished]) -> dict[str, np.ndarray]:
    """The verifiers' rewards as the batch's carried fields (`turnrl.rewards.carried`): a reward is
    the row's score as it is, an error scores 0 (or stops the run, `rollout.agent.on_error`)."""
    return {
        "agent_reward": np.array([f.reward for f in finished], dtype=object),
        "agent_answer": np.array([None] * len(finished), dtype=object),
        "agent_error": np.array([f.error for f in finished], dtype=object),
    }


def workspace_metrics(finished: list[Finished]) -> dict[str, float]:
    """`workspace/verified_reward/mean` over the episodes the verifier scored, `workspace/failed`:
    the share whose session or verifier failed."""
    scored = [f.reward for f in finished if f.reward is not None]
    out = {"workspace/failed": (len(finished) - len(scored)) / max(1, len(finished))}
    if scored:
        out["workspace/verified_reward/mean"] = sum(scored) / len(scored)
    return out
