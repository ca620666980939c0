"""The tree shows the design: the package is a stack of rooms, each importing only its own
room and those below it, and nothing imports in a circle.

Read from the source with ``ast`` (nothing is imported), so a lazy import inside a
function counts as much as one at the top of a file, and so does one under
``if TYPE_CHECKING:``: an annotation that names a class above is a dependency too.

- **Rooms, bottom to top** (``ROOMS``): the base (errors, atomic files, checkpoints, batch
  walking), the toy model and its data, the run record, training, reading a curve
  (signals, judge), the guard, the faults, finding the cause (debug, data-parallel
  runs), pictures; then the course, the interview practice on top of it, and the
  command line over everything. A new module must be given a room here.
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
# The rooms of the package, bottom to top: a module may import its own room and those below.
# ``nanlab`` itself (the front door, whose public names load lazily) is the top.
ROOMS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("nanlab.errors",)),
    ("layers and optimizers", ("nanlab.layers", "nanlab.optim")),
    ("toy", ("nanlab.toy",)),
    ("runs", ("nanlab.runs",)),
    ("train", ("nanlab.train",)),
    ("analysis", ("nanlab.analysis",)),
    ("guard", ("nanlab.guard",)),
    ("faults", ("nanlab.faults",)),
    ("debug", ("nanlab.debug", "nanlab.distributed")),
    ("viz", ("nanlab.viz",)),
    ("course", ("nanlab.course",)),
    ("interview", ("nanlab.interview",)),
    ("cli", ("nanlab.cli",)),
    ("front door", ("nanlab",)),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
           if p.stem != "__main__"}


def layer(module: str) -> int:
    """The room of a module, as its height (0 = the base); -1 when it has none."""
    for height, (_, prefixes) in enumerate(ROOMS):
        if any(module == p or module.startswith(p + ".") for p in prefixes if p != "nanlab"):
            return height
    return len(ROOMS) - 1 if module == "nanlab" else -1


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
    """The nanlab modules ``module`` imports, anywhere in its file (annotation-only imports
    included), resolved to the modules that define the names."""
    tree = ast.parse(MODULES[module].read_text())
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
def test_no_module_imports_a_room_above_its_own(module):
    assert layer(module) >= 0, f"{module} has no room: add it to ROOMS in {__file__}"
    room = ROOMS[layer(module)][0]
    above = sorted(f"{m} ({ROOMS[layer(m)][0]})" for m in GRAPH[module] if layer(m) > layer(module))
    assert not above, (f"{module} (room {room!r}) imports {above}; a room may import only "
                       "itself and the rooms below it: " + " < ".join(r for r, _ in ROOMS))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it (at most ~600)"


def test_the_checker_sees_a_cycle_and_a_layer_breach():
    """The two rules can fail: a made-up graph with a cycle, a library module on the course."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer("nanlab.faults.run") < layer("nanlab.course.checks") < layer("nanlab.interview")
    assert layer("nanlab.train") < layer("nanlab.analysis.judge") < layer("nanlab.faults.inject")
    assert layer("nanlab.somewhere_new") == -1
    assert imports_of("nanlab.course.widgets") >= {"nanlab.course.progress"}


def test_annotation_only_imports_count():
    """An import under ``if TYPE_CHECKING:`` is still an edge: the file names the class."""
    import textwrap

    source = textwrap.dedent('''
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from nanlab.train import Trainer
    ''')
    path = ROOT / "tests" / "_layout_probe.py"
    MODULES["nanlab._layout_probe"] = path
    try:
        path.write_text(source)
        assert imports_of("nanlab._layout_probe") == {"nanlab.train.trainer"}
    finally:
        del MODULES["nanlab._layout_probe"]
        path.unlink()
