"""The tree shows the design: the library never imports the course, and nothing imports in a circle.

Read from the source with ``ast`` (nothing is imported), so a lazy import inside a
function counts as much as one at the top of a file: both are a dependency. Imports
under ``if TYPE_CHECKING:`` are for annotations only and do not count.

- **Layers.** The library (everything but ``nanlab.course``, ``nanlab.interview`` and the
  ``nanlab.cli`` front end) works on any model and imports none of them; the course does
  not import the interview practice, which sits on top of both.
- **No cycles** between modules. An import of a name that a package re-exports counts
  as an import of the submodule that defines it, so ``from nanlab.faults import run_fault``
  depends on ``nanlab.faults.run``, not on the whole of ``nanlab.faults``.
- **Modules stay small**: about 600 lines at most.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nanlab"
MAX_LINES = 650
# The layer of each part of the package: a module may import its own layer and those below.
LAYERS = {"nanlab.cli": 3, "nanlab.interview": 2, "nanlab.course": 1}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
           if p.stem != "__main__"}


def layer(module: str) -> int:
    return next((n for prefix, n in LAYERS.items()
                 if module == prefix or module.startswith(prefix + ".")), 0)


def re_exports(package: str) -> dict[str, str]:
    """Name -> the submodule it comes from, for the names a package's __init__ imports."""
    path = MODULES[package]
    if path.name != "__init__.py":
        return {}
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            for alias in node.names:
                out[alias.asname or alias.name] = node.module
    return out


def imports_of(module: str) -> set[str]:
    """The nanlab modules ``module`` imports, anywhere in its file, resolved to definitions."""
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):  # drop the annotation-only imports
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not (node.module == "nanlab" or node.module.startswith("nanlab.")):
                continue
            exported = re_exports(node.module) if node.module in MODULES else {}
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in MODULES:
                    found.add(sub)  # a submodule: from nanlab.faults import fixes
                elif alias.name in exported:
                    found.add(exported[alias.name])
                elif node.module in MODULES:
                    found.add(node.module)
    found.discard(module)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_layer_above_its_own(module):
    above = sorted(m for m in GRAPH[module] if layer(m) > layer(module))
    assert not above, (f"{module} (layer {layer(module)}) imports {above}: the library must not "
                       "import the course, the interview or the CLI, nor the course the interview")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it (at most ~600)"


def test_the_checker_sees_a_cycle_and_a_layer_breach():
    """The two rules can fail: a made-up graph with a cycle, a library module on the course."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer("nanlab.faults.run") < layer("nanlab.course.checks") < layer("nanlab.interview")
    assert imports_of("nanlab.course.widgets") >= {"nanlab.course.progress"}
