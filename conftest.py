"""Every nbval run of solutions/ and labs/ also checks the statuses of the check cells."""

import pytest

pytest_plugins = ["nanlab.course.pytest_plugin"]


def pytest_report_header(config):
    """Which CPU kernel path this run takes: results near a threshold depend on it."""
    import os

    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "torch's default")
    return (f"torch {torch.__version__}, CPU kernels: "
            f"{torch.backends.cpu.get_cpu_capability()}, OMP_NUM_THREADS={threads}")


# -- each lab and its solution in one kernel run (make test) ---------------------------------
# labs/ is generated from solutions/ (`nanlab course check` proves it byte for byte): the two
# differ only inside the exercises' function bodies (stubs) and in a few solution-only cells.
# Running both folders trains every lab twice for what one run can show. With
# `--labs-with-solutions`, each labs/NN.ipynb runs once as the learner meets it (the stubs in
# place top to bottom, every check "not done yet"), and at every check the solution's code is
# put in for that moment only: its exercise and predict(...) cells, the check (which must say
# "passed" and match the solution's stored output), then the stubs again. Every other cell
# is compared with the solution's stored output where the solution tags it.
import re as _re  # noqa: E402

_CALLS = {name: _re.compile(rf"(?<![\w.]){name}\(") for name in ("check", "predict")}


def pytest_addoption(parser):
    parser.getgroup("nbval").addoption(
        "--labs-with-solutions", action="store_true",
        help="run each labs/ notebook once, with its solution's checks and outputs put in "
             "at each check (instead of running solutions/ and labs/ apart)")


def combined_notebook(lab_path):
    """The lab with its solution's checks put in at each check cell (see above)."""
    import copy
    from pathlib import Path

    import nbformat

    from nanlab.course.checks import NOT_DONE, PASSED
    from nanlab.course.notebooks import CHECK_OUTPUT_TAG, SOLUTION_ONLY_TAG
    from nanlab.course.pytest_plugin import EXPECT_KEY

    lab_path = Path(lab_path)
    lab = nbformat.read(lab_path, as_version=4)
    sol = nbformat.read(lab_path.parent.parent / "solutions" / lab_path.name, as_version=4)
    twins = {c.id: c for c in lab.cells}
    cells, exercises, predicts = [], [], []

    def emit(cell, want, compared=False):
        cell = copy.deepcopy(cell)
        cell.metadata[EXPECT_KEY] = want
        if cell.cell_type == "code" and not compared:  # nothing stored to compare
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", [])
                                     if t != CHECK_OUTPUT_TAG]
            cell.outputs = []
        cells.append(cell)

    def with_solution(s):  # the solution's code in for one cell, then the stubs back
        for _, e in exercises:
            if e.id != s.id:
                emit(e, PASSED)
        for p in predicts:
            emit(p, PASSED)
        emit(s, PASSED, compared=True)
        for stub, _ in exercises:
            emit(stub, NOT_DONE)

    cells += [c for c in lab.cells if c.id not in {s.id for s in sol.cells}]  # banner, install
    for s in sol.cells:
        if s.cell_type != "code":
            if s.id in twins:
                emit(twins[s.id], NOT_DONE)
            continue
        if SOLUTION_ONLY_TAG in s.metadata.get("tags", []):
            with_solution(s)
            continue
        stub = twins[s.id]
        if stub.source != s.source:
            emit(stub, NOT_DONE)
            exercises.append((stub, s))
        if _CALLS["check"].search(s.source):
            if stub.source == s.source:
                emit(stub, NOT_DONE)
            with_solution(s)
        elif stub.source == s.source:
            stub = copy.deepcopy(stub)
            stub.metadata["tags"], stub.outputs = s.metadata.get("tags", []), s.outputs
            stub.execution_count = s.execution_count  # nbval compares only a cell that ran
            emit(stub, NOT_DONE, compared=True)
            if _CALLS["predict"].search(s.source):
                predicts.append(s)
    nb = copy.deepcopy(lab)
    nb.cells = cells
    return nb


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    """With --labs-with-solutions, a labs/*.ipynb is collected as its combined notebook."""
    collected = yield
    if not (parent.config.getoption("labs_with_solutions", False)
            and file_path.suffix == ".ipynb" and file_path.parent.name == "labs"):
        return collected
    from unittest import mock

    import nbformat
    from nbval.plugin import IPyNbFile

    class LabWithSolution(IPyNbFile):
        def collect(self):
            nb = combined_notebook(self.path)
            with mock.patch.object(nbformat, "read", lambda *a, **k: nb):
                return list(super().collect())

    return [LabWithSolution.from_parent(parent, path=file_path) if isinstance(c, IPyNbFile)
            else c for c in collected]
