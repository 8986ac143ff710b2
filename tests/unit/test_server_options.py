"""A server's options made from its config dataclass (`servers.options`): one place per setting."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from turnrl.servers.options import add_options, values_of


@dataclass
class Toy:
    workers: int = 4
    """Runs at once. More words after the first sentence."""
    timeout: float = 2.5
    """Seconds a run may take. Then it is stopped."""
    name: str = "toy"
    """What it is called."""
    zygote: bool = True
    """Prepare runs ahead of time."""
    verbose: bool = False
    """Log every run."""


NAMES = ("workers", "timeout", "name", "zygote", "verbose")


def parse(*argv: str) -> dict:
    parser = argparse.ArgumentParser()
    add_options(parser, Toy, NAMES)
    return values_of(parser.parse_args(list(argv)), NAMES)


def test_defaults_types_and_switches_come_from_the_dataclass():
    assert Toy(**parse()) == Toy()
    got = Toy(**parse("--workers", "8", "--timeout", "0.5", "--name", "x", "--no-zygote", "--verbose"))
    assert got == Toy(8, 0.5, "x", False, True)


def test_help_is_the_fields_docstring_first_sentence_and_default():
    parser = argparse.ArgumentParser()
    add_options(parser, Toy, NAMES)
    text = " ".join(parser.format_help().split())
    assert "--workers WORKERS Runs at once (default 4)" in text and "More words" not in text
    assert "--timeout TIMEOUT Seconds a run may take (default 2.5)" in text
    assert "--no-zygote switch off (on by default): Prepare runs ahead of time" in text
    assert "--verbose Log every run" in text


def test_a_wrong_type_is_argparses_one_line(capsys):
    with pytest.raises(SystemExit):
        parse("--workers", "many")
    assert "argument --workers: invalid int value: 'many'" in capsys.readouterr().err
