"""The one family of bad-input errors: what `turnrl train` reports in one line instead of a traceback."""

from __future__ import annotations


class TurnrlInputError(ValueError):
    """The base of every bad-input error: a bad config, data file, model path, reward function, or a
    tool or tool server that cannot start. Its message is one line naming the culprit (key, file,
    row, URL) and, where there is one, the fix.

    Start-up handlers catch this family only, so a bug (a plain ValueError, KeyError, ...) raised
    while a run starts keeps its traceback. It is a ValueError so `except ValueError` still sees it.
    """
