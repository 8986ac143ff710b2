"""What an agent process (`rollout.agent.command`) said, read into a `Returned`: pure functions.

    read_stdout("thinking...\\nanswer: 408\\n")        # Returned(answer="408")
    read_stdout('log\\n{"reward": 1, "turns": 3}')      # Returned(reward=1.0, metrics={"turns": 3.0})
    read_reward_file("0.5\\n")                          # Returned(reward=0.5)

On stdout, a line is read as a reward when it is `reward: <number>` or a JSON object with a
`reward` key (its other numbers become `agent/fn/<name>`); as an answer when it is
`answer: <text>` or a JSON object with an `answer` string. The last such line counts, and a reward
anywhere wins over an answer.
"""

from __future__ import annotations

import json
from typing import Any

from turnrl.agent.functions.entrypoint import Returned, read_return

REWARD, ANSWER = "reward:", "answer:"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_object(line: str) -> dict[str, Any] | None:
    if not (line.startswith("{") and line.endswith("}")):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reward_line(line: str) -> Returned | None:
    """A reward line read (a bad one says why), or None for any other line."""
    if line.startswith(REWARD):
        text = line[len(REWARD) :].strip()
        returned = read_return(_float(text))
        if returned.bad:
            return Returned(bad=f"printed {_short(line)!r}; expected `reward: <finite number>`")
        return returned
    value = _json_object(line)
    if value is None or "reward" not in value:
        return None
    returned = read_return(value)
    if returned.bad:
        returned.bad = f"printed {_short(line)!r}: {returned.bad}"
    return returned


def _float(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _answer_line(line: str) -> str | None:
    if line.startswith(ANSWER):
        return line[len(ANSWER) :].strip()
    value = _json_object(line)
    answer = value.get("answer") if value is not None else None
    return answer if isinstance(answer, str) else None


def read_stdout(text: str) -> Returned:
    """The last reward line, else the last answer line; `Returned()` (neither) when there is none."""
    lines = [line.strip() for line in text.splitlines()]
    for line in reversed(lines):
        returned = _reward_line(line)
        if returned is not None:
            return returned
    for line in reversed(lines):
        answer = _answer_line(line)
        if answer is not None:
            return Returned(answer=answer)
    return Returned()


def read_reward_file(text: str) -> Returned:
    """A test's reward file: a number, or a JSON object with `reward` (and other numbers)."""
    text = text.strip()
    value = _json_object(text)
    returned = read_return(value if value is not None else _float(text))
    if returned.bad or returned.answer is not None:
        return Returned(bad=f"wrote {_short(text)!r} to TURNRL_REWARD_FILE; expected a number")
    return returned


def last_line(data: bytes, limit: int = 200) -> str:
    """The last non-empty line of a process's output, cut to `limit` characters, for messages."""
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return _short(lines[-1], limit) if lines else ""
