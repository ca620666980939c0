"""Solutions pass every check and unfilled labs say "not done yet", checked on the nbval run.

``nanlab.course.pytest_plugin`` (loaded by the repository's conftest.py) fails an nbval cell whose
check lines have the wrong status, so the notebooks run once, not once for nbval and once
more for the inverted check. These tests prove the plugin can fail, and check statically
that every notebook has exercises to check.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nanlab.course.pytest_plugin import check_lines, expected_status

ROOT = Path(__file__).resolve().parents[1]


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.mark.slow
def test_plugin_fails_a_passing_lab_and_an_undone_solution(tmp_path):
    passing = "from nanlab.course.checks import check\ncheck('two', lambda: 1 + 1, 2)"
    undone = ("from nanlab.course.checks import check\n"
              "def f():\n    raise NotImplementedError()\ncheck('two', f, 2)")
    _notebook(tmp_path / "labs" / "passes.ipynb", passing)       # wrong: a lab must be undone
    _notebook(tmp_path / "labs" / "undone.ipynb", undone)        # right
    _notebook(tmp_path / "solutions" / "undone.ipynb", undone)   # wrong: a solution must pass
    _notebook(tmp_path / "solutions" / "passes.ipynb", passing)  # right
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "nanlab.course.pytest_plugin", "--nbval-lax", "labs", "solutions"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NANLAB_PROGRESS": str(tmp_path / "p.json")},
    )
    out = result.stdout
    assert "2 failed, 2 passed" in out, out
    assert "FAILED labs/passes.ipynb" in out and "FAILED solutions/undone.ipynb" in out, out


def test_check_lines_and_expected_status():
    outs = [{"output_type": "stream", "name": "stdout",
             "text": "passed: a\nnot done yet: b\n  hint\nnot yet right: c: 1 != 2\n"},
            {"output_type": "stream", "name": "stderr", "text": "passed: ignored\n"}]
    assert check_lines(outs) == ["passed: a", "not done yet: b", "not yet right: c: 1 != 2"]
    assert expected_status(ROOT / "solutions" / "00_start_here.ipynb") == "passed"
    assert expected_status(ROOT / "labs" / "00_start_here.ipynb") == "not done yet"
    assert expected_status(ROOT / "tests" / "x.ipynb") is None


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb")))
def test_every_solution_has_a_checked_exercise(name):
    nb = nbformat.read(ROOT / "solutions" / name, as_version=4)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any("### BEGIN SOLUTION" in s for s in sources), f"{name} has no exercise"
    assert any("check(" in s for s in sources), f"{name} has no check cell"
    stored = [line for c in nb.cells if c.cell_type == "code"
              for line in check_lines(c.get("outputs", []))]
    assert stored and all(line.startswith("passed:") for line in stored), stored
