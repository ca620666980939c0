"""solutions/ -> labs/: stubs, cleared outputs, the banner, sync checks and clear errors."""

import argparse
from pathlib import Path

import jupytext
import nbformat
import pytest

from nanlab.course import notebooks as course
from nanlab.course.notebooks import CourseError

ROOT = Path(__file__).resolve().parents[1]

FUNCTION_SOLUTION = """\
def f(x):
    if x > 0:
        ### BEGIN SOLUTION
        return x + 1
        ### END SOLUTION
    return 0"""


def _solution(path: Path, cells: list, pair: bool = True) -> Path:
    """A solution notebook and, with ``pair``, its percent-format Python file."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nb.cells = cells
    for i, cell in enumerate(nb.cells):
        cell.id = f"c{i}"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    if pair:
        jupytext.write(nb, path.with_suffix(".py"), fmt="py:percent")
    return path


@pytest.fixture
def dirs(tmp_path):
    """A solutions folder with one notebook that uses every feature the builder handles."""
    banner = nbformat.v4.new_markdown_cell("This is the source.")
    banner.metadata["tags"] = ["solution-only"]
    checked = nbformat.v4.new_code_cell("print(f(1))", execution_count=2)
    checked.metadata["tags"] = ["nbval-check-output", "keep-me"]
    checked.outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    cells = [
        banner,
        nbformat.v4.new_markdown_cell("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"),
        nbformat.v4.new_code_cell(FUNCTION_SOLUTION, execution_count=1),
        checked,
    ]
    _solution(tmp_path / "solutions" / "01_demo.ipynb", cells)
    return tmp_path / "solutions", tmp_path / "labs"


def _lab(labs: Path) -> nbformat.NotebookNode:
    return nbformat.read(labs / "01_demo.ipynb", as_version=4)


def test_build_then_check_is_clean(dirs):
    solutions, labs = dirs
    assert course.build(solutions, labs) == ([labs / "01_demo.ipynb"], [], [])
    assert course.check(solutions, labs) == []
    before = (labs / "01_demo.ipynb").read_bytes()
    course.build(solutions, labs)
    assert (labs / "01_demo.ipynb").read_bytes() == before  # deterministic


def test_lab_has_banner_stubs_and_no_outputs(dirs):
    solutions, labs = dirs
    course.build(solutions, labs)
    cells = _lab(labs).cells
    assert cells[0].cell_type == "markdown"
    assert "Generated from `solutions/01_demo.ipynb` by `nanlab course build`" in cells[0].source
    assert "do not edit by hand" in cells[0].source
    assert all("This is the source" not in c.source for c in cells)  # solution-only dropped
    assert cells[1].id == course.INSTALL_ID and cells[1].cell_type == "code"
    assert cells[2].source == "Why?\n_Your answer here._"
    for cell in cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert cells[4].metadata["tags"] == ["keep-me"]  # nbval tag removed, others kept


def test_stub_is_indented_like_the_block_it_replaces(dirs):
    solutions, labs = dirs
    course.build(solutions, labs)
    assert _lab(labs).cells[3].source == (
        "def f(x):\n"
        "    if x > 0:\n"
        "        # YOUR CODE HERE\n"
        "        raise NotImplementedError()\n"
        "    return 0"
    )


def test_hand_edit_of_a_lab_is_reported(dirs):
    solutions, labs = dirs
    course.build(solutions, labs)
    nb = _lab(labs)
    nb.cells[3].source = "def f(x):\n    return x + 1"
    nbformat.write(nb, labs / "01_demo.ipynb")
    [problem] = course.check(solutions, labs)
    assert problem.startswith(f"stale: {labs / '01_demo.ipynb'}")
    assert "cell 3 (code) source differs" in problem


def _edit_solution_and_lab(solutions: Path, labs: Path) -> None:
    """The instructor changes the solution after the learner typed an answer into the lab."""
    course.build(solutions, labs)
    nb = _lab(labs)
    nb.cells[3].source = "def f(x):\n    return x + 1  # my answer"
    nbformat.write(nb, labs / "01_demo.ipynb")
    sol = nbformat.read(solutions / "01_demo.ipynb", as_version=4)
    sol.cells.append(nbformat.v4.new_markdown_cell("A new closing note."))
    nbformat.write(sol, solutions / "01_demo.ipynb")


def test_a_rebuild_keeps_a_lab_the_learner_edited(dirs, capsys):
    solutions, labs = dirs
    _edit_solution_and_lab(solutions, labs)
    written, kept, backups = course.build(solutions, labs)
    assert (written, kept, backups) == ([], [labs / "01_demo.ipynb"], [])
    assert "# my answer" in _lab(labs).cells[3].source
    args = argparse.Namespace(solutions=str(solutions), labs=str(labs), force=False)
    assert course.build_command(args) == 1
    out = capsys.readouterr().out
    assert f"kept {labs / '01_demo.ipynb'}" in out and "--force" in out


def test_a_forced_rebuild_saves_the_edited_lab_first(dirs):
    solutions, labs = dirs
    _edit_solution_and_lab(solutions, labs)
    written, kept, backups = course.build(solutions, labs, force=True)
    assert kept == [] and backups == [labs / "01_demo.ipynb.bak"]
    assert "# my answer" in backups[0].read_text()
    assert _lab(labs).cells[-1].source == "A new closing note."


def test_running_the_cells_is_not_an_edit(dirs):
    solutions, labs = dirs
    course.build(solutions, labs)
    nb = _lab(labs)
    nb.cells[4].outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    nbformat.write(nb, labs / "01_demo.ipynb")
    assert not course.edited_by_learner(labs / "01_demo.ipynb")
    assert course.build(solutions, labs)[1] == []


def test_saved_outputs_in_a_lab_are_reported(dirs):
    solutions, labs = dirs
    course.build(solutions, labs)
    nb = _lab(labs)
    nb.cells[4].outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    nbformat.write(nb, labs / "01_demo.ipynb")
    assert "has outputs" in course.check(solutions, labs)[0]


def test_missing_and_extra_labs_are_named(dirs):
    solutions, labs = dirs
    labs.mkdir()
    (labs / "99_orphan.ipynb").write_text("{}")
    problems = course.check(solutions, labs)
    assert problems[0].startswith(f"missing: {labs / '01_demo.ipynb'}")
    assert problems[1].startswith(f"extra: {labs / '99_orphan.ipynb'}")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f():\n    ### BEGIN SOLUTION\n    return 1",
         "line 2: '### BEGIN SOLUTION' is never closed"),
        ("def f():\n    return 1\n    ### END SOLUTION", "line 3: '### END SOLUTION' without"),
        ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    ### END SOLUTION",
         "line 3: '### BEGIN SOLUTION' inside the block opened on line 2"),
        ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "at the top level of a code cell"),
    ],
)
def test_bad_markers_name_file_cell_and_line(tmp_path, source, message):
    _solution(tmp_path / "solutions" / "02_bad.ipynb",
              [nbformat.v4.new_markdown_cell("intro"), nbformat.v4.new_code_cell(source)])
    with pytest.raises(CourseError) as err:
        course.build(tmp_path / "solutions", tmp_path / "labs")
    assert f"{tmp_path / 'solutions' / '02_bad.ipynb'} cell 1 (code)" in str(err.value)
    assert message in str(err.value)
    assert not (tmp_path / "labs" / "02_bad.ipynb").exists()


def test_missing_solutions_dir_is_a_clear_error(tmp_path):
    with pytest.raises(CourseError, match="solutions directory .*nope.* does not exist"):
        course.check(tmp_path / "nope", tmp_path / "labs")


def test_commands_print_one_line_per_difference_and_exit_codes(dirs, capsys):
    solutions, labs = dirs
    args = argparse.Namespace(solutions=str(solutions), labs=str(labs))
    assert course.check_command(args) == 1
    assert "missing:" in capsys.readouterr().out
    assert course.build_command(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert course.check_command(args) == 0
    assert "in sync" in capsys.readouterr().out
    bad = argparse.Namespace(solutions=str(solutions.parent / "nope"), labs=str(labs))
    assert course.check_command(bad) == 1
    assert capsys.readouterr().out.startswith("error: solutions directory")


def test_add_parser_wires_course_subcommands(dirs):
    solutions, labs = dirs
    parser = argparse.ArgumentParser()
    course.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["course", "build", "--solutions", str(solutions),
                              "--labs", str(labs)])
    assert args.func(args) == 0
    args = parser.parse_args(["course", "check", "--solutions", str(solutions),
                              "--labs", str(labs)])
    assert args.func(args) == 0


def test_repository_labs_are_in_sync_with_solutions():
    """The nbdev-style guard: a lab edited by hand or a solution not rebuilt fails CI."""
    assert course.check(ROOT / "solutions", ROOT / "labs") == []


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=str)
def test_solutions_are_saved_with_outputs_for_nbval(path):
    """nbval skips a cell that was never run, so an unexecuted solution would compare nothing."""
    nb = nbformat.read(path, as_version=4)
    marked = [c for c in nb.cells if "nbval-check-output" in c.metadata.get("tags", [])]
    assert marked, f"{path.name} marks no cell for nbval to compare"
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    unrun = [i for i, c in code if c.execution_count is None]
    assert not unrun, f"cells {unrun} not executed; run `nanlab course execute {path.name}`"


@pytest.mark.slow
def test_execute_stores_outputs_deterministically(tmp_path):
    cells = [nbformat.v4.new_code_cell("print(6 * 7)"),
             nbformat.v4.new_code_cell("import ipywidgets\nipywidgets.Button()")]
    path = _solution(tmp_path / "nb.ipynb", cells, pair=False)
    course.execute(path, timeout=60)
    first = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].outputs[0].text == "42\n"
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count == 2  # random model ids
    course.execute(path, timeout=60)
    assert path.read_bytes() == first


@pytest.mark.slow
def test_execute_names_the_failing_notebook(tmp_path):
    path = _solution(tmp_path / "nb.ipynb", [nbformat.v4.new_code_cell("1 / 0")], pair=False)
    with pytest.raises(CourseError, match="nb.ipynb: a cell raised"):
        course.execute(path, timeout=60)


def test_hand_edit_of_a_repository_lab_copy_is_caught(tmp_path):
    """The real notebooks, copied: editing one lab cell by hand makes ``check`` fail."""
    import shutil

    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    shutil.copytree(ROOT / "labs", tmp_path / "labs")
    lab = next((tmp_path / "labs").glob("*.ipynb"))
    nb = nbformat.read(lab, as_version=4)
    cell = next(c for c in nb.cells if "raise NotImplementedError()" in c.source)
    cell.source = cell.source.replace("raise NotImplementedError()", "return None")
    nbformat.write(nb, lab)
    [problem] = course.check(tmp_path / "solutions", tmp_path / "labs")
    assert problem.startswith(f"stale: {lab}") and "source differs" in problem


def test_repository_solution_pairs_are_in_step():
    """Every solutions/<name>.ipynb has its solutions/<name>.py, with the same cells."""
    assert course.pair_problems(ROOT / "solutions") == []


def test_an_edit_of_either_file_of_a_pair_is_caught(dirs):
    solutions, labs = dirs
    source = solutions / "01_demo.py"
    source.write_text(source.read_text() + "\n# %%\nprint('new cell')\n")
    [problem] = course.pair_problems(solutions)
    assert problem.startswith(f"out of sync: {source}") and "from cell 4" in problem
    source.unlink()
    [problem] = course.pair_problems(solutions)
    assert problem.startswith("unpaired:") and "has no 01_demo.py" in problem
    (solutions / "02_orphan.py").write_text("# %%\nprint(1)\n")
    assert any(p.startswith(f"unpaired: {solutions / '02_orphan.py'}")
               for p in course.pair_problems(solutions))


def _changed_lines(before: str, after: str) -> list[str]:
    import difflib

    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_inserting_one_cell_changes_only_that_cells_lines(tmp_path):
    """A real lab pair: one cell inserted in the .py; after sync the notebook's diff is that
    cell alone (8 lines), every other cell keeping its id and its outputs."""
    import os
    import shutil

    name = "03_learning_rate"
    for suffix in (".py", ".ipynb"):
        shutil.copy(ROOT / "solutions" / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    shutil.copy(ROOT / "solutions" / "jupytext.toml", tmp_path / "jupytext.toml")
    source, notebook = tmp_path / f"{name}.py", tmp_path / f"{name}.ipynb"
    before = notebook.read_text()
    text = source.read_text()
    at = text.index("# %% [markdown]\n# ## Setup")
    source.write_text(text[:at] + "# %% [markdown]\n# A cell an instructor added.\n\n" + text[at:])
    os.utime(source, (notebook.stat().st_mtime + 10,) * 2)  # the .py is the newer file
    course.sync(source)
    changed = _changed_lines(before, notebook.read_text())
    assert all(line.startswith("+") for line in changed), changed
    assert len(changed) == 8 and '+    "A cell an instructor added."' in changed, changed
    old, new = nbformat.reads(before, as_version=4), nbformat.read(notebook, as_version=4)
    kept = [c for c in new.cells if c.source != "A cell an instructor added."]
    assert [(c.id, c.get("outputs")) for c in kept] == \
        [(c.id, c.get("outputs")) for c in old.cells]
    assert course.pair_problems(tmp_path) == []


def test_sync_of_a_missing_or_wrong_file_is_one_clear_error(tmp_path):
    with pytest.raises(CourseError, match="does not exist"):
        course.sync(tmp_path / "nope.py")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CourseError, match="allowed: .py or .ipynb"):
        course.sync(tmp_path / "notes.txt")


def test_first_code_cell_of_a_lab_says_how_to_install_nanlab_where_it_is_missing(tmp_path):
    """Colab: the first code cell explains the install instead of an ImportError."""
    import subprocess
    import sys

    missing = subprocess.run([sys.executable, "-S", "-c", course.INSTALL_CHECK], cwd=tmp_path,
                             capture_output=True, text=True)  # -S: no site-packages, no nanlab
    assert missing.returncode == 0, missing.stderr
    assert "nanlab[course] is not installed" in missing.stdout and "%pip install" in missing.stdout
    present = subprocess.run([sys.executable, "-c", course.INSTALL_CHECK], cwd=tmp_path,
                             capture_output=True, text=True)
    assert present.returncode == 0 and present.stdout == ""


def test_execute_of_a_missing_or_garbled_file_is_a_one_line_course_error(tmp_path):
    with pytest.raises(CourseError, match=r"nope.ipynb: does not exist$"):
        course.execute(tmp_path / "nope.ipynb")
    (tmp_path / "bad.ipynb").write_text("{garbled")
    with pytest.raises(CourseError, match=r"bad.ipynb: is not JSON, so not a notebook$"):
        course.execute(tmp_path / "bad.ipynb")
    with pytest.raises(CourseError, match="is a folder, not a notebook"):
        course.execute(tmp_path)
