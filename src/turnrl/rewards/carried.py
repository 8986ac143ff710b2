"""Rewards an agent rollout carries into the batch, read by the reward stage (`RuleReward`).

An agent written as a function (`rollout.agent`, docs/agent-programs.md) decides its own reward, or hands
back its final messages for the rule scorers to read. The rollout writes, per row:

    agent_reward   the reward it returned (a finite float), or None
    agent_answer   the last assistant message of the messages it returned, or None
    agent_error    why its episode failed, one line naming the agent; '' when it did not
    agent_rates    the numbers it returned besides its reward ({} if none): as a rule scorer's
                   extras, `acc` / `formatted` become `val/accuracy` and `val/format_rate`, apart
                   from the reward, and any other `val/<name>/mean`

and the reward stage, per row: an error scores 0 (or stops the run, `rollout.agent.on_error`); a
reward is the row's score as it is; an answer is the text the row's rule scorer reads instead of
the decoded response; with none of them, the row is scored as any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnrl.batch import Batch
from turnrl.errors import TurnrlInputError

FIELDS = ("agent_reward", "agent_answer", "agent_error")


class AgentEpisodeError(TurnrlInputError):
    """An agent function whose episode failed where `rollout.agent.on_error` says stop; the message
    names the agent, what it did, the row, its index and data_source."""


@dataclass(frozen=True)
class CarriedRow:
    reward: float | None
    answer: str | None
    error: str
    rates: dict[str, float]


class Carried:
    """The agent fields of one batch, row by row."""

    def __init__(self, batch: Batch) -> None:
        self.rewards = batch["agent_reward"]
        self.answers = batch["agent_answer"]
        self.errors = batch["agent_error"]
        self.rates = batch["agent_rates"] if "agent_rates" in batch else [{}] * len(batch)

    @classmethod
    def of(cls, batch: Batch) -> Carried | None:
        """The batch's carried rewards; None for a batch no agent function made."""
        return cls(batch) if all(f in batch for f in FIELDS) else None

    def row(self, i: int) -> CarriedRow:
        reward = self.rewards[i]
        reward = None if reward is None else float(reward)
        return CarriedRow(reward, self.answers[i], self.errors[i] or "", dict(self.rates[i] or {}))

    def texts(self, decoded: list[str]) -> list[str]:
        """The text each row's scorers read: the agent's final answer where it gave one."""
        return [d if a is None else a for d, a in zip(decoded, self.answers, strict=True)]

    def scored_by_rule(self, i: int) -> bool:
        """Whether row i goes to the rule scorers (it carries no reward and no error)."""
        row = self.row(i)
        return not row.error and row.reward is None


def agent_fix(on_error: str) -> str:
    later = "" if on_error == "fail" else " even in the first step"
    return f"fix the agent, or set rollout.agent.on_error=zero to score such episodes 0{later} (counted in agent/errors/<kind>)"
