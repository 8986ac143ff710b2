"""The package's import graph: no cycles between modules, and every import points to the same layer
or a lower one (docs/architecture.md lists the layers).

Every import statement counts, those inside functions too (they run as well), and so do the
modules `turnrl.cli` imports by name (`COMMANDS`, `importlib.import_module("turnrl...")`).
Importing a package counts as importing its `__init__` module. A subprocess started with
`python -m turnrl.x` is another process, not an import, and does not count. Imports under
`if TYPE_CHECKING:` never run, so they make no cycle, but they must still point down the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# module path prefix -> layer, bottom (1) to top (12); the longest matching prefix wins
LAYERS: dict[str, int] = {
    "turnrl": 1,  # the package's __init__
    "turnrl.errors": 1,
    "turnrl.batch": 1,
    "turnrl.fields": 1,
    "turnrl.tensors": 1,
    "turnrl.runtime": 1,
    "turnrl.keys": 1,
    "turnrl.plugins": 1,
    "turnrl.config": 2,
    "turnrl.algorithms": 2,
    "turnrl.tracking": 2,
    "turnrl.models": 3,
    "turnrl.rollout": 4,
    "turnrl.servers": 5,
    "turnrl.tinker": 5,  # the Tinker-compatible training service: a server that also trains (LoRA)
    "turnrl.rewards": 6,
    "turnrl.agent": 6,
    "turnrl.agent.gateway": 6,  # the OpenAI-compatible gateway that records function agents' episodes
    "turnrl.agent.functions": 6,  # agents written as functions against the OpenAI API
    "turnrl.tasks": 7,
    "turnrl.data": 8,
    "turnrl.workers": 9,
    "turnrl.trainer": 10,
    "turnrl.evaluate": 11,
    "turnrl.supervised": 11,
    "turnrl.inspector": 11,
    "turnrl.live": 11,  # serves the policy to clients and trains on their sessions: a trainer with a server
    "turnrl.export": 11,
    "turnrl.cli": 12,
    "turnrl.recipes": 12,  # example agents beside the recipes: they import no turnrl module
}


def module_names(src: Path = SRC) -> dict[str, Path]:
    """`turnrl.a.b` -> its file (a package's name maps to its `__init__.py`)."""
    out = {}
    for path in sorted((src / "turnrl").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int | None:
    """The layer of the longest `LAYERS` prefix of `module` (a bare `turnrl.x` not listed: None)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS and (n > 1 or module == "turnrl"):
            return LAYERS[prefix]
    return None


def _target(name: str, known: set[str]) -> str | None:
    """The known module an imported dotted name lands in: the name itself, else its longest known
    prefix (`from turnrl.models.loader import load_model` -> `turnrl.models.loader`)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return None


def _string_imports(tree: ast.Module) -> list[str]:
    """Modules imported by name: `import_module("turnrl.x")` calls and module-level dicts whose
    values are module names (a command table such as `turnrl.cli.COMMANDS`)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "import_module" and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            names += [
                v.value for v in value.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
            ]
    return [n for n in names if n.startswith("turnrl.") or n == "turnrl"]


def _typing_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes under `if TYPE_CHECKING:`: imported for annotations, never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", "")
            if name == "TYPE_CHECKING":
                out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_of(module: str, path: Path, known: set[str], typing: bool = False) -> set[str]:
    """Every turnrl module `module` imports, at any depth of its code (with `typing`, also those
    imported for annotations only)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = set() if typing else _typing_only(tree)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from pkg import sub` imports the sub-module when there is one, else the package
            names = [f"{stem}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name == "turnrl" or name.startswith("turnrl."):
                target = _target(name, known)
                if target is not None:
                    found.add(target)
    for name in _string_imports(tree):
        target = _target(name, known)
        if target is not None:
            found.add(target)
    found.discard(module)
    return found


def import_graph(src: Path = SRC, typing: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports when it runs (with `typing`: and for annotations)."""
    files = module_names(src)
    known = set(files)
    return {m: imports_of(m, p, known, typing) for m, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path `[a, b, ..., a]`, or None; iterative depth-first search in sorted order,
    so the cycle reported is the same on every run."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if state.get(root):
            continue
        path = [root]
        stack = [iter(sorted(graph.get(root, ())))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected knot: find one, cut its last edge, look again."""
    graph = {k: set(v) for k, v in graph.items()}
    out = []
    while (cycle := find_cycle(graph)) is not None:
        out.append(cycle)
        graph[cycle[-2]].discard(cycle[-1])
    return out


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            low, high = layer_of(module), layer_of(target)
            if low is not None and high is not None and high > low:
                out.append(f"{module} (layer {low}) imports {target} (layer {high})")
    return out


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    acyclic = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert find_cycle(acyclic) is None
    cyclic = {"a": {"b"}, "b": {"c"}, "c": {"d", "a"}, "d": set(), "e": {"e"}}
    assert find_cycle(cyclic) == ["a", "b", "c", "a"]
    assert all_cycles(cyclic) == [["a", "b", "c", "a"], ["e", "e"]]


def test_the_graph_reads_imports_inside_functions_relative_ones_and_command_tables(tmp_path):
    pkg = tmp_path / "turnrl"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "loader.py").write_text("def f():\n    from turnrl.export import export\n")
    (pkg / "models" / "sources.py").write_text("from . import loader\nfrom .loader import f\n")
    (pkg / "export.py").write_text("from turnrl.models import sources\n")
    (pkg / "cli.py").write_text('COMMANDS = {"export": "turnrl.export"}\n')
    (pkg / "batch.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import turnrl.cli\n"
    )
    graph = import_graph(tmp_path)
    assert graph["turnrl.models.loader"] == {"turnrl.export"}
    assert graph["turnrl.models.sources"] == {"turnrl.models.loader"}
    assert graph["turnrl.cli"] == {"turnrl.export"}
    assert find_cycle(graph) == [
        "turnrl.export",
        "turnrl.models.sources",
        "turnrl.models.loader",
        "turnrl.export",
    ]
    assert upward_imports(graph) == ["turnrl.models.loader (layer 3) imports turnrl.export (layer 11)"]
    assert graph["turnrl.batch"] == set()  # annotations only: no cycle, but still a dependency
    assert import_graph(tmp_path, typing=True)["turnrl.batch"] == {"turnrl.cli"}


def test_the_layers_table_places_modules():
    assert layer_of("turnrl") == 1 and layer_of("turnrl.batch") == 1
    assert layer_of("turnrl.models.loader") == 3
    assert layer_of("turnrl.servers.inference.app") == 5
    assert layer_of("turnrl.cli") == 12 and layer_of("turnrl.supervised.cli") == 11
    assert layer_of("turnrl.nowhere") is None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_module_has_a_layer(graph):
    unplaced = sorted(m for m in graph if layer_of(m) is None)
    assert not unplaced, (
        f"modules outside the layers table (add them to LAYERS and docs/architecture.md): {unplaced}"
    )


def test_no_import_cycles(graph):
    cycles = all_cycles(graph)
    shown = "\n".join(" -> ".join(c) for c in cycles)
    assert not cycles, f"import cycles (imports inside functions count):\n{shown}"


def test_imports_point_down_the_layers():
    """Annotation-only imports count here too: a type from a higher layer is a dependency on it."""
    up = upward_imports(import_graph(typing=True))
    shown = "\n".join(up)
    assert not up, f"imports that point up a layer (move the code down, or the import up):\n{shown}"
