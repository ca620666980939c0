"""Run every notebook like ``nbgrader validate`` and ``--invert``: solutions pass, labs are undone.

A solution must print ``passed:`` in every check cell. Its generated lab must run top to
bottom without a cell raising, and every check must say ``not done yet`` (a check that
passes in an unfilled lab tests nothing; one that fails differently means the stub leaks).
"""

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
STATUSES = ("passed:", "not done yet:", "not yet right:")


def _run(path: Path, tmp_path: Path) -> list[str]:
    """Execute a copy of the notebook; return the check status lines, in order."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return _status_lines(nb)


def _status_lines(nb: nbformat.NotebookNode) -> list[str]:
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stdout":
                lines += [s for s in out.text.splitlines() if s.startswith(STATUSES)]
    return lines


def _names(folder: str) -> list[str]:
    return sorted(p.name for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("name", _names("solutions"))
def test_solution_passes_every_check(name, tmp_path):
    lines = _run(ROOT / "solutions" / name, tmp_path)
    assert lines, f"solutions/{name} has no check cells"
    assert all(line.startswith("passed:") for line in lines), lines


@pytest.mark.slow
@pytest.mark.parametrize("name", _names("labs"))
def test_unfilled_lab_runs_and_every_check_is_not_done(name, tmp_path):
    lines = _run(ROOT / "labs" / name, tmp_path)  # raises CellExecutionError if a cell fails
    assert lines, f"labs/{name} has no check cells"
    assert all(line.startswith("not done yet:") for line in lines), lines
    stored = _status_lines(nbformat.read(ROOT / "solutions" / name, as_version=4))
    assert [s.split(":")[1] for s in lines] == [s.split(":")[1] for s in stored]
