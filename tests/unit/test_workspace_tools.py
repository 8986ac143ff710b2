"""The editor's pure parts: a unique replacement and numbered lines (the tools against a real sandbox
session: tests/integration/test_workspace_tools.py)."""

from __future__ import annotations

from turnrl.agent.tools.workspace import numbered, replace_once


def test_replace_once_needs_exactly_one_match():
    assert replace_once("a = 1\nb = 1\n", "a = 1", "a = 2") == ("a = 2\nb = 1\n", "")
    assert replace_once("x = 1\nx = 1\n", "x = 1", "x = 2") == (
        None,
        "`old_str` occurs 2 times; add context to make it unique",
    )
    assert replace_once("x = 1\n", "y", "z") == (None, "`old_str` does not occur")
    assert replace_once("x = 1\n", "", "z") == (None, "`old_str` is empty")


def test_numbered_counts_from_the_first_line_shown():
    assert numbered("a\nb", 9) == "     9\ta\n    10\tb"
