"""Function length in the package: a function reads alone when it fits on a screen, so at most
`MAX_LONG` functions may run over `LONG` lines and none over `LIMIT`.

A function's length is its span in the source, from its `def` line (decorators excluded) to its last
line, docstring and comments included; a nested function counts on its own and inside its parent.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

SRC = Path(__file__).resolve().parents[2] / "src"

LONG = 50
"""Lines above which a function is long."""
MAX_LONG = 10
"""How many long functions the package may have."""
LIMIT = 80
"""Lines above which no function may run."""


class Function(NamedTuple):
    lines: int
    where: str  # file:line, the file relative to the repository
    name: str

    def __str__(self) -> str:
        return f"{self.where} {self.name} ({self.lines} lines)"


def functions(source: str, where: str) -> list[Function]:
    """Every function and method of `source`, `where` naming its file."""
    out = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            out.append(Function(node.end_lineno - node.lineno + 1, f"{where}:{node.lineno}", node.name))
    return out


def package_functions(src: Path = SRC) -> list[Function]:
    out = []
    for path in sorted((src / "turnrl").rglob("*.py")):
        out += functions(path.read_text(), str(path.relative_to(src.parent)))
    return out


def test_the_length_is_the_span_from_def_to_the_last_line():
    source = (
        "import functools\n"
        "@functools.cache\n"
        "def f(x):\n"
        '    """doc"""\n'
        "    def g():\n"
        "        return x\n"
        "\n"
        "    return g\n"
        "class C:\n"
        "    async def m(self): ...\n"
    )
    assert set(functions(source, "m.py")) == {
        Function(6, "m.py:3", "f"),
        Function(2, "m.py:5", "g"),
        Function(1, "m.py:10", "m"),
    }


def test_few_long_functions_and_none_too_long():
    found = sorted(package_functions(), reverse=True)
    assert found, f"no function found under {SRC / 'turnrl'}"
    too_long = [f for f in found if f.lines > LIMIT]
    long = [f for f in found if f.lines > LONG]
    assert not too_long, f"functions over {LIMIT} lines (split them): " + "; ".join(map(str, too_long))
    assert len(long) <= MAX_LONG, (
        f"{len(long)} functions over {LONG} lines, at most {MAX_LONG} allowed (shorten one): "
        + "; ".join(map(str, long))
    )
