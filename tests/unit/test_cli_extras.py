"""`turnrl <command>` when a command family cannot be imported: a missing optional package is one
line naming the extra that installs it; a missing turnrl module is a bug and keeps its traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from turnrl import cli

ROOT = Path(__file__).resolve().parents[2]

BUG = "import turnrl.no_such_module_xyz\n\ndef register(sub):\n    sub.add_parser('fam')\n"
NEEDS_VLLM = "import vllm\n\ndef register(sub):\n    sub.add_parser('fam')\n"
NEEDS_UNLISTED = "import no_such_package_xyz\n\ndef register(sub):\n    sub.add_parser('fam')\n"
RUNS_WITHOUT_MCP = """
def register(sub):
    sub.add_parser('fam').set_defaults(func=run)

def run(args):
    import mcp.client.stdio  # imported when the command runs, as the families do
    return 0
"""


@pytest.fixture
def family(tmp_path, monkeypatch):
    """`turnrl fam` served by a module written from the given source."""

    def make(source: str) -> str:
        name = f"fam_{abs(hash(source))}"
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setitem(cli.COMMANDS, "fam", name)
        return name

    return make


@pytest.fixture
def without(monkeypatch):
    """Make an installed package look absent: `import pkg` raises ModuleNotFoundError(name=pkg)."""

    def hide(package: str) -> None:
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, package, None)

    return hide


def test_a_missing_turnrl_module_is_a_traceback_not_the_help_screen(family, capsys):
    family(BUG)
    for argv in (["fam"], [], ["--help"]):  # named, or listed on the help screen: the same bug
        with pytest.raises(ModuleNotFoundError) as err:
            cli.main(argv)
        assert err.value.name == "turnrl.no_such_module_xyz"
    assert "usage" not in capsys.readouterr().out


def test_a_missing_package_no_extra_installs_is_a_traceback(family):
    family(NEEDS_UNLISTED)
    with pytest.raises(ModuleNotFoundError, match="no_such_package_xyz"):
        cli.main(["fam"])


def test_a_missing_optional_package_is_one_line_naming_its_extra(family, without, capsys):
    family(NEEDS_VLLM)
    without("vllm")
    assert cli.main(["fam"]) == 1
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        "turnrl fam: error: needs the optional package 'vllm', which is not installed: "
        'pip install -e ".[vllm]"'
    ]
    assert out.out == ""


def test_the_help_screen_still_lists_a_family_whose_extra_is_missing(family, without, capsys):
    family(NEEDS_VLLM)
    without("vllm")
    assert cli.main([]) == 2  # the help screen, as with every family importable
    out = capsys.readouterr().out
    assert re.search(r"fam\s+needs vllm: pip install -e \"\.\[vllm\]\"", out) and "train" in out


def test_a_missing_optional_package_imported_when_the_command_runs_is_one_line(family, without, capsys):
    family(RUNS_WITHOUT_MCP)
    without("mcp")
    assert cli.main(["fam"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "turnrl fam: error: needs the optional package 'mcp', which is not installed: "
        'pip install -e ".[agents]"'
    ]


def test_an_installed_extra_broken_inside_keeps_its_traceback(family, capsys):
    # a submodule missing from a package that is installed: not a missing install
    family("import json.no_such_submodule\n\ndef register(sub):\n    sub.add_parser('fam')\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(cli.EXTRAS, "json", "agents")
        with pytest.raises(ModuleNotFoundError):
            cli.main(["fam"])


def test_every_extra_in_the_table_installs_its_package():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for package, extra in cli.EXTRAS.items():
        assert extra in extras, (package, extra)
        names = [
            re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower().replace("-", "_") for req in extras[extra]
        ]
        assert any(n == package or n.startswith(package + "_") for n in names), (package, extra, names)


def test_the_console_script_shows_the_traceback_of_a_missing_turnrl_module(tmp_path):
    (tmp_path / "fam_bug.py").write_text(BUG)
    code = "import sys; from turnrl import cli; cli.COMMANDS['fam'] = 'fam_bug'; sys.exit(cli.main(['fam']))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1  # an uncaught exception
    assert "Traceback" in done.stderr and "turnrl.no_such_module_xyz" in done.stderr
    assert "usage" not in done.stdout + done.stderr
