"""Test modules import shared helpers from tests/support, never from each other: a test file can be
read, moved or deleted on its own, and collecting one file never runs another's module code."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> list[str]:
    """Every module `path` imports, at the top or inside functions; relative imports as '.name'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
    return found


def test_no_test_module_imports_another():
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for module in imported_modules(path):
            last = module.rsplit(".", 1)[-1]
            if (
                module.startswith(".")
                or module.startswith(("tests.unit", "tests.integration"))
                or last.startswith("test_")
            ):
                offenders.append(f"{path.relative_to(TESTS)} imports {module}")
    assert offenders == [], "move shared helpers to tests/support:\n" + "\n".join(offenders)


def test_the_check_sees_imports_inside_functions(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_x():\n    from tests.integration.test_train_tiny import tiny_overrides\n")
    assert imported_modules(probe) == ["tests.integration.test_train_tiny"]
