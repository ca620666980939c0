"""Write solution notebooks from Python: ``tools/nb_<name>.py`` -> ``solutions/<name>.ipynb``.

An authoring aid for notebooks written as code (easier to review and diff than JSON). Each
``tools/nb_*.py`` defines ``CELLS``, a list made with ``md(...)`` and ``code(...)``. The
notebook is written without outputs; then store the outputs nbval compares and rebuild::

    python tools/make_solutions.py 01_numbers
    python -m nanlab.course execute solutions/01_numbers.ipynb
    python -m nanlab.course build

``--check`` writes nothing and fails when a solution's cells differ from its source (the
test suite runs it).

Running it overwrites the notebook: once a notebook is edited in JupyterLab instead, stop
generating it (delete its ``nb_*.py``) so that there is only one source.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanlab.course import render  # noqa: E402

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def md(text: str, *tags: str) -> nbformat.NotebookNode:
    """A markdown cell; ``text`` is dedented and stripped."""
    cell = nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def code(text: str, *tags: str) -> nbformat.NotebookNode:
    """A code cell; tag ``nbval-check-output`` for cells whose output nbval compares."""
    cell = nbformat.v4.new_code_cell(textwrap.dedent(text).strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def notebook(name: str, cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    """A notebook with stable cell ids (``<name>-<index>``) so regenerating is deterministic."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(cells):
        cell.id = f"{name}-{i:02d}".replace("_", "-")
    nb.cells = cells
    return nb


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def differences(name: str, solutions: Path = ROOT / "solutions") -> list[str]:
    """Where ``solutions/<name>.ipynb`` differs from ``tools/nb_<name>.py`` (cells, not outputs)."""
    src = Path(__file__).parent / f"nb_{name}.py"
    target = solutions / f"{name}.ipynb"
    if not target.exists():
        return [f"{target} is missing: run `python tools/make_solutions.py {name}`"]
    want = notebook(name, _load(src).CELLS).cells
    have = nbformat.read(target, as_version=4).cells
    problems = []
    if len(want) != len(have):
        problems.append(f"{target}: {len(have)} cells, {src.name} makes {len(want)}")
    for i, (w, h) in enumerate(zip(want, have, strict=False)):
        same = (w.cell_type == h.cell_type and w.source == h.source
                and w.metadata.get("tags", []) == h.metadata.get("tags", []))
        if not same:
            first = w.source.splitlines()[0] if w.source else ""
            problems.append(f"{target}: cell {i} differs from {src.name} ({first[:50]!r})")
            break
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="e.g. 01_numbers (default: every nb_*.py)")
    parser.add_argument("--out", default=str(ROOT / "solutions"), help="solutions folder")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail if a solution's cells differ from its source")
    args = parser.parse_args(argv)
    sources = sorted(Path(__file__).parent.glob("nb_*.py"))
    if args.names:
        sources = [Path(__file__).parent / f"nb_{n}.py" for n in args.names]
    failed = False
    for src in sources:
        if not src.exists():
            print(f"error: {src} does not exist")
            return 1
        name = src.stem.removeprefix("nb_")
        if args.check:
            problems = differences(name, Path(args.out))
            print("\n".join(problems) or f"{name}: in sync with {src.name}")
            failed = failed or bool(problems)
            continue
        target = Path(args.out) / f"{name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(notebook(name, _load(src).CELLS)), encoding="utf-8")
        print(f"wrote {target}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
