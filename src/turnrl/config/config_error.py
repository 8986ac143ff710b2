"""The error every config rule raises, and the rule most of them share: a setting from a fixed list."""

from __future__ import annotations

from turnrl.errors import TurnrlInputError


class ConfigError(TurnrlInputError):
    """A bad recipe or override; the message is one line naming the key and the fix."""


def one_of(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown '{key}' '{value}'; valid: {', '.join(valid)}")
